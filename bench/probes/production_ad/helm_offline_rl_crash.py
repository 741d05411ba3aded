# expect: numpy_requires_grad
# source: https://github.com/ml-jku/helm/issues/3
"""Offline actor-critic with a frozen transformer history memory (HELM-style).

Observations are projected into the token-embedding space of a frozen
pretrained transformer (FrozenHopfield-style random projection onto a fixed
vocabulary embedding), the transformer keeps a memory of past timesteps and
its output is concatenated with a trainable CNN encoding of the current frame.
The policy is trained offline from a logged trajectory dataset with an
advantage-weighted actor loss and a TD critic; a periodic evaluation rolls the
policy out in a small grid environment and records memory states for later
analysis.  Everything is synthetic and CPU-only.
"""
import argparse
from collections import deque

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class FrozenHopfield(nn.Module):
    def __init__(self, obs_dim, word_embeddings, beta=1.0):
        super().__init__()
        self.register_buffer('rand_obs_proj', torch.randn(word_embeddings.size(1), obs_dim) / obs_dim ** 0.5)
        self.word_embs = word_embeddings
        self.beta = beta

    def forward(self, observations):
        projected = observations.flatten(1) @ self.rand_obs_proj.T
        attn = torch.softmax(self.beta * projected @ self.word_embs.T, dim=-1)
        return attn @ self.word_embs


class HELMPolicy(nn.Module):
    def __init__(self, obs_shape, n_actions, mem_len=4, d_model=32):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d_model, 4, 64, batch_first=True)
        self.model = nn.TransformerEncoder(layer, num_layers=1)
        self.input_embeddings = nn.Embedding(100, d_model)
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.fhp = FrozenHopfield(int(np.prod(obs_shape)), self.input_embeddings.weight)
        self.query_encoder = nn.Sequential(nn.Conv2d(obs_shape[0], 16, 3, padding=1), nn.ReLU(),
                                           nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(64, d_model))
        self.actor = nn.Linear(2 * d_model, n_actions)
        self.critic = nn.Linear(2 * d_model, 1)
        self.mem_len, self.d_model = mem_len, d_model
        self.memory = None
        self.hidden_log = []

    def reset_memory(self, batch_size):
        self.memory = deque([torch.zeros(batch_size, self.d_model)] * self.mem_len, maxlen=self.mem_len)

    def forward(self, observations):
        bs = observations.size(0)
        if self.memory is None or self.memory[0].size(0) != bs:
            self.reset_memory(bs)
        vocab_encoding = self.fhp(observations)
        self.memory.append(vocab_encoding)
        tokens = torch.stack(list(self.memory), dim=1)
        hidden = self.model(tokens)[:, -1]
        query = self.query_encoder(observations)
        out = torch.cat([hidden, query], dim=-1)
        return self.actor(out), self.critic(out).squeeze(-1), hidden

    def act(self, observations):
        logits, value, hidden = self(observations)
        self.hidden_log.append(hidden.cpu().numpy())  # raises
        return int(logits.argmax(-1)), float(value)


class GridEnv:
    def __init__(self, size=6, seed=0):
        self.size, self.rng = size, np.random.default_rng(seed)

    def reset(self):
        self.pos, self.goal, self.t = self.rng.integers(0, self.size, 2), self.rng.integers(0, self.size, 2), 0
        return self._obs()

    def _obs(self):
        obs = np.zeros((2, self.size, self.size), dtype=np.float32)
        obs[0, self.pos[0], self.pos[1]] = 1.0
        obs[1, self.goal[0], self.goal[1]] = 1.0
        return obs

    def step(self, action):
        moves = [(0, 1), (1, 0), (0, -1), (-1, 0)]
        self.pos = np.clip(self.pos + moves[action], 0, self.size - 1)
        self.t += 1
        done = bool((self.pos == self.goal).all()) or self.t >= 12
        return self._obs(), float((self.pos == self.goal).all()), done


def logged_dataset(env, n_steps, seed):
    rng = np.random.default_rng(seed)
    obs, acts, rews, nxt, dones = [], [], [], [], []
    o = env.reset()
    for _ in range(n_steps):
        a = int(rng.integers(0, 4))
        o2, r, d = env.step(a)
        obs.append(o); acts.append(a); rews.append(r); nxt.append(o2); dones.append(d)
        o = env.reset() if d else o2
    as_t = lambda x, dt=torch.float32: torch.tensor(np.array(x), dtype=dt)
    return as_t(obs), as_t(acts, torch.long), as_t(rews), as_t(nxt), as_t(dones)


class OfflineTrainer:
    def __init__(self, agent, args):
        self.agent, self.args = agent, args
        trainable = [p for p in agent.parameters() if p.requires_grad]
        self.optimizer = torch.optim.Adam(trainable, lr=args.lr)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=10, gamma=0.9)

    def train_step(self, batch):
        obs, acts, rews, nxt, dones = batch
        self.agent.reset_memory(obs.size(0))
        logits, values, _ = self.agent(obs)
        with torch.no_grad():
            self.agent.reset_memory(obs.size(0))
            _, next_values, _ = self.agent(nxt)
            target = rews + self.args.gamma * (1 - dones) * next_values
            weights = torch.exp((target - values.detach()) / self.args.awr_beta).clamp(max=20.0)
        actor_loss = -(weights * F.log_softmax(logits, -1).gather(1, acts[:, None]).squeeze(1)).mean()
        critic_loss = F.mse_loss(values, target)
        loss = actor_loss + self.args.vf_coef * critic_loss
        self.optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.agent.parameters(), 0.5)
        self.optimizer.step()
        self.scheduler.step()
        return loss.item()

    def evaluate(self, env, episodes=2):
        returns = []
        for _ in range(episodes):
            obs, done, ret = env.reset(), False, 0.0
            self.agent.reset_memory(1)
            while not done:
                action, _ = self.agent.act(torch.tensor(obs)[None])
                obs, r, done = env.step(action)
                ret += r
            returns.append(ret)
        memory_states = np.concatenate(self.agent.hidden_log, axis=0)
        self.agent.hidden_log.clear()
        return float(np.mean(returns)), memory_states.shape


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--lr', type=float, default=3e-4)
    parser.add_argument('--gamma', type=float, default=0.99)
    parser.add_argument('--awr_beta', type=float, default=1.0)
    parser.add_argument('--vf_coef', type=float, default=0.5)
    parser.add_argument('--updates', type=int, default=4)
    parser.add_argument('--eval_every', type=int, default=2)
    args = parser.parse_args([])
    torch.manual_seed(0)
    env = GridEnv(seed=0)
    data = logged_dataset(env, 256, seed=1)
    agent = HELMPolicy(obs_shape=(2, 6, 6), n_actions=4)
    trainer = OfflineTrainer(agent, args)
    g = torch.Generator().manual_seed(2)
    for update in range(1, args.updates + 1):
        idx = torch.randint(0, data[0].size(0), (32,), generator=g)
        loss = trainer.train_step(tuple(x[idx] for x in data))
        if update % args.eval_every == 0:
            ret, mem_shape = trainer.evaluate(GridEnv(seed=update))
            print(f"update {update}: loss {loss:.4f} eval return {ret:.2f} memory {mem_shape}")


if __name__ == '__main__':
    main()
