# expect: clean
# source: https://github.com/OpenRLHF/OpenRLHF/pull/145
"""Preference-based imitation of a demonstrator with Direct Preference Optimisation.

Trajectories are sequences of discrete actions conditioned on an initial
observation. A GRU policy ("actor") is fine-tuned against a frozen reference
copy with the DPO objective on pairs (preferred demonstration, rejected
rollout). Structure follows an RLHF-style codebase: Actor wrapper with a
`_get_batch_logps` helper, a DPOLoss module, a DPOTrainer with
concatenated forward, train_step/evaluate, LR scheduler and logging. Data are
synthetic: the demonstrator prefers actions close to a hidden goal.
"""
import argparse
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F


def parse_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--obs-dim", type=int, default=6)
    p.add_argument("--n-actions", type=int, default=8)
    p.add_argument("--horizon", type=int, default=6)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--n-pairs", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--beta", type=float, default=0.1)
    p.add_argument("--label-smoothing", type=float, default=0.0)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--bc-warmup-steps", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


class Actor(nn.Module):
    def __init__(self, obs_dim, n_actions, hidden):
        super().__init__()
        self.n_actions = n_actions
        self.obs_proj = nn.Linear(obs_dim, hidden)
        self.act_embed = nn.Embedding(n_actions + 1, hidden)
        self.rnn = nn.GRU(hidden, hidden, batch_first=True)
        self.head = nn.Linear(hidden, n_actions)

    def forward(self, obs, actions):
        bos = torch.full((actions.size(0), 1), self.n_actions, dtype=torch.long)
        inputs = self.act_embed(torch.cat([bos, actions[:, :-1]], dim=1))
        h0 = torch.tanh(self.obs_proj(obs)).unsqueeze(0)
        out, _ = self.rnn(inputs, h0)
        return self.head(out)

    @staticmethod
    def _get_batch_logps(logits, labels, mask):
        logps = torch.gather(logits.log_softmax(-1), dim=2, index=labels.unsqueeze(2)).squeeze(2)
        return (logps * mask).sum(-1)


class DPOLoss(nn.Module):
    def __init__(self, beta, label_smoothing=0.0, ipo=False):
        super().__init__()
        self.beta = beta
        self.label_smoothing = label_smoothing
        self.ipo = ipo

    def forward(self, policy_chosen_logps, policy_rejected_logps, reference_chosen_logps,
                reference_rejected_logps):
        pi_logratios = policy_chosen_logps - policy_rejected_logps
        ref_logratios = reference_chosen_logps - reference_rejected_logps
        logits = pi_logratios - ref_logratios
        if self.ipo:
            losses = (logits - 1 / (2 * self.beta)) ** 2
        else:
            losses = (-F.logsigmoid(self.beta * logits) * (1 - self.label_smoothing)
                      - F.logsigmoid(-self.beta * logits) * self.label_smoothing)
        loss = losses.mean()
        chosen_rewards = self.beta * (policy_chosen_logps - reference_chosen_logps).detach()
        rejected_rewards = self.beta * (policy_rejected_logps - reference_rejected_logps).detach()
        return loss, chosen_rewards, rejected_rewards


class PreferenceDataset:
    def __init__(self, args, gen):
        self.goal = torch.randint(0, args.n_actions, (args.obs_dim,), generator=gen)
        self.obs = torch.randn(args.n_pairs, args.obs_dim, generator=gen)
        target = self.goal[self.obs.argmax(1)]
        noise = torch.randint(-1, 2, (args.n_pairs, args.horizon), generator=gen)
        self.chosen = (target[:, None] + noise).clamp(0, args.n_actions - 1)
        self.rejected = torch.randint(0, args.n_actions, (args.n_pairs, args.horizon), generator=gen)
        self.mask = torch.ones(args.n_pairs, args.horizon)

    def batches(self, batch_size, gen):
        perm = torch.randperm(self.obs.size(0), generator=gen)
        for i in range(0, len(perm), batch_size):
            idx = perm[i:i + batch_size]
            yield self.obs[idx], self.chosen[idx], self.rejected[idx], self.mask[idx]


class DPOTrainer:
    def __init__(self, args, model, ref_model):
        self.args = args
        self.model, self.ref_model = model, ref_model
        self.ref_model.eval()
        for p in self.ref_model.parameters():
            p.requires_grad_(False)
        self.loss_fn = DPOLoss(args.beta, args.label_smoothing)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / max(1, args.bc_warmup_steps)))
        self.global_step = 0

    def concatenated_forward(self, model, obs, chosen, rejected, mask):
        obs2 = torch.cat([obs, obs], 0)
        actions = torch.cat([chosen, rejected], 0)
        mask2 = torch.cat([mask, mask], 0)
        logps = Actor._get_batch_logps(model(obs2, actions), actions, mask2)
        n = obs.size(0)
        return logps[:n], logps[n:]

    def train_step(self, batch):
        obs, chosen, rejected, mask = batch
        self.model.train()
        chosen_logps, rejected_logps = self.concatenated_forward(self.model, obs, chosen, rejected, mask)
        with torch.no_grad():
            ref_chosen, ref_rejected = self.concatenated_forward(self.ref_model, obs, chosen, rejected, mask)
        loss, chosen_reward, reject_reward = self.loss_fn(chosen_logps, rejected_logps, ref_chosen, ref_rejected)
        self.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.scheduler.step()
        self.global_step += 1
        acc = (chosen_reward > reject_reward).float().mean().item()
        return {"loss": loss.mean().item(), "acc": acc,
                "margin": (chosen_reward - reject_reward).mean().item()}

    @torch.no_grad()
    def evaluate(self, dataset):
        self.model.eval()
        c, r = self.concatenated_forward(self.model, dataset.obs, dataset.chosen, dataset.rejected, dataset.mask)
        return (c > r).float().mean().item()

    def fit(self, dataset, gen):
        for epoch in range(self.args.epochs):
            for batch in dataset.batches(self.args.batch_size, gen):
                logs = self.train_step(batch)
            print("epoch %d loss %.4f reward_acc %.3f margin %.4f pref_acc %.3f" % (
                epoch, logs["loss"], logs["acc"], logs["margin"], self.evaluate(dataset)))


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    dataset = PreferenceDataset(args, gen)
    model = Actor(args.obs_dim, args.n_actions, args.hidden)
    ref_model = copy.deepcopy(model)
    trainer = DPOTrainer(args, model, ref_model)
    trainer.fit(dataset, gen)


if __name__ == "__main__":
    main([])
