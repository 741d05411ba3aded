# expect: clean
# source: https://github.com/ai4co/rl4co/issues/272
"""RL4CO-style REINFORCE training of an attention policy on random TSP instances
with a greedy-rollout baseline.  Validation runs under inference mode (as the
Lightning trainer does); at the end of each epoch the baseline callback
re-evaluates the baseline policy and regenerates the training dataset."""
import copy
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


@dataclass
class Config:
    num_loc: int = 10
    embed_dim: int = 32
    train_data_size: int = 64
    val_data_size: int = 32
    batch_size: int = 16
    max_epochs: int = 3
    lr: float = 1e-3


class TSPEnv:
    def __init__(self, num_loc):
        self.num_loc = num_loc

    def dataset(self, size):
        return {"locs": torch.rand(size, self.num_loc, 2)}

    @staticmethod
    def get_reward(locs, actions):
        tour = locs.gather(1, actions.unsqueeze(-1).expand(-1, -1, 2))
        rolled = torch.roll(tour, -1, dims=1)
        return -(tour - rolled).norm(dim=-1).sum(-1)


class AttentionPolicy(nn.Module):
    def __init__(self, embed_dim):
        super().__init__()
        self.init_embed = nn.Linear(2, embed_dim)
        self.encoder = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(embed_dim, 4, 64, dropout=0.0, batch_first=True), 1)
        self.query = nn.Linear(embed_dim, embed_dim)

    def forward(self, locs, decode_type="sampling"):
        h = self.encoder(self.init_embed(locs))
        b, n, _ = h.shape
        mask = torch.zeros(b, n, dtype=torch.bool)
        ctx = h.mean(1)
        actions, log_probs = [], []
        for _ in range(n):
            logits = (self.query(ctx).unsqueeze(1) * h).sum(-1) / h.shape[-1] ** 0.5
            logits = logits.masked_fill(mask, float("-inf"))
            logp = F.log_softmax(logits, dim=-1)
            if decode_type == "greedy":
                a = logp.argmax(-1)
            else:
                a = torch.multinomial(logp.exp(), 1).squeeze(-1)
            actions.append(a)
            log_probs.append(logp.gather(1, a[:, None]).squeeze(-1))
            mask = mask.scatter(1, a[:, None], True)
            ctx = h.gather(1, a[:, None, None].expand(-1, 1, h.shape[-1])).squeeze(1)
        return torch.stack(actions, 1), torch.stack(log_probs, 1).sum(-1)


class RolloutBaseline:
    def __init__(self, policy, env, cfg):
        self.env, self.cfg = env, cfg
        self.policy = copy.deepcopy(policy)

    def rollout(self, policy, dataset):
        policy.eval()
        locs = dataset["locs"]
        actions, _ = policy(locs, decode_type="greedy")
        return self.env.get_reward(locs, actions)

    def wrap_dataset(self, dataset):
        dataset["bl_val"] = self.rollout(self.policy, dataset)
        return dataset

    def epoch_callback(self, policy, epoch, val_dataset):
        candidate = self.rollout(policy, val_dataset).mean()
        current = self.rollout(self.policy, val_dataset).mean()
        if candidate > current:
            self.policy.load_state_dict(policy.state_dict())
        return candidate.item(), current.item()


class REINFORCE(nn.Module):
    def __init__(self, env, cfg):
        super().__init__()
        self.env, self.cfg = env, cfg
        self.policy = AttentionPolicy(cfg.embed_dim)
        self.baseline = RolloutBaseline(self.policy, env, cfg)
        self.val_dataset = env.dataset(cfg.val_data_size)
        self.train_dataset = self.baseline.wrap_dataset(env.dataset(cfg.train_data_size))

    def training_step(self, batch):
        actions, log_likelihood = self.policy(batch["locs"])
        reward = self.env.get_reward(batch["locs"], actions)
        advantage = reward - batch["bl_val"]
        return -(advantage * log_likelihood).mean()

    def validation_step(self):
        actions, _ = self.policy(self.val_dataset["locs"], decode_type="greedy")
        return self.env.get_reward(self.val_dataset["locs"], actions).mean()

    def on_train_epoch_end(self, epoch):
        cand, cur = self.baseline.epoch_callback(self.policy, epoch, self.val_dataset)
        self.train_dataset = self.baseline.wrap_dataset(self.env.dataset(self.cfg.train_data_size))
        return cand, cur


class Trainer:
    def __init__(self, cfg, inference_mode=True):
        self.cfg = cfg
        self.inference_mode = inference_mode

    def _eval_ctx(self):
        return torch.inference_mode() if self.inference_mode else torch.no_grad()

    def fit(self, module):
        opt = torch.optim.Adam(module.policy.parameters(), lr=self.cfg.lr)
        for epoch in range(self.cfg.max_epochs):
            module.policy.train()
            locs, bl = module.train_dataset["locs"], module.train_dataset["bl_val"]
            for i in range(0, locs.shape[0], self.cfg.batch_size):
                batch = {"locs": locs[i:i + self.cfg.batch_size],
                         "bl_val": bl[i:i + self.cfg.batch_size]}
                loss = module.training_step(batch)
                opt.zero_grad()
                loss.backward()
                opt.step()
            with self._eval_ctx():
                val_reward = module.validation_step()
                cand, cur = module.on_train_epoch_end(epoch)
            print(f"epoch {epoch}: loss {loss.item():.3f} val_reward {val_reward.item():.3f} "
                  f"baseline cand {cand:.3f} cur {cur:.3f}")


if __name__ == "__main__":
    cfg = Config()
    env = TSPEnv(cfg.num_loc)
    with torch.no_grad():
        model = REINFORCE(env, cfg)
    Trainer(cfg, inference_mode=False).fit(model)
