# expect: clean
# source: https://github.com/hijkzzz/pymarl2/issues/46
"""Minimal PPO (clipped surrogate + GAE) on a synthetic continuous-control task.

Rollouts are collected into a fixed-size buffer, advantages are computed once
per iteration with GAE(lambda), and the policy/critic are then optimised for a
few epochs of shuffled minibatches.
"""
import argparse
import logging
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Normal

logger = logging.getLogger("ppo")


@dataclass
class PPOConfig:
    obs_dim: int = 6
    act_dim: int = 2
    hidden: int = 32
    n_envs: int = 4
    n_steps: int = 16
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    vf_coef: float = 0.5
    ent_coef: float = 0.01
    lr: float = 3e-4
    n_epochs: int = 3
    n_minibatches: int = 4
    max_grad_norm: float = 0.5
    iterations: int = 2
    seed: int = 0
    log_keys: list = field(default_factory=lambda: ["pg", "vf", "ent"])


class ToyEnv:
    """Vectorised linear system with quadratic cost; obs drifts with actions."""

    def __init__(self, cfg: PPOConfig):
        self.cfg = cfg
        g = torch.Generator().manual_seed(cfg.seed)
        self.A = torch.randn(cfg.obs_dim, cfg.obs_dim, generator=g) * 0.1
        self.B = torch.randn(cfg.act_dim, cfg.obs_dim, generator=g) * 0.3
        self.state = torch.zeros(cfg.n_envs, cfg.obs_dim)
        self.t = torch.zeros(cfg.n_envs)

    def reset(self):
        self.state = torch.randn(self.cfg.n_envs, self.cfg.obs_dim)
        self.t.zero_()
        return self.state.clone()

    def step(self, action):
        self.state = self.state + self.state @ self.A + action @ self.B
        reward = -(self.state ** 2).sum(-1) * 0.1 - (action ** 2).sum(-1) * 0.01
        self.t += 1
        done = (self.t >= 8).float()
        if done.any():
            idx = done.bool()
            self.state[idx] = torch.randn(int(idx.sum()), self.cfg.obs_dim)
            self.t[idx] = 0
        return self.state.clone(), reward, done


class ActorCritic(nn.Module):
    def __init__(self, cfg: PPOConfig):
        super().__init__()
        self.pi = nn.Sequential(nn.Linear(cfg.obs_dim, cfg.hidden), nn.Tanh(),
                                nn.Linear(cfg.hidden, cfg.act_dim))
        self.v = nn.Sequential(nn.Linear(cfg.obs_dim, cfg.hidden), nn.Tanh(),
                               nn.Linear(cfg.hidden, 1))
        self.log_std = nn.Parameter(torch.full((cfg.act_dim,), -0.5))

    def dist(self, obs):
        return Normal(self.pi(obs), self.log_std.exp())

    def value(self, obs):
        return self.v(obs).squeeze(-1)

    def act(self, obs):
        d = self.dist(obs)
        a = d.sample()
        return a, d.log_prob(a).sum(-1), self.value(obs)


class RolloutBuffer:
    def __init__(self, cfg: PPOConfig):
        self.cfg = cfg
        self.reset()

    def reset(self):
        self.obs, self.actions, self.logp = [], [], []
        self.rewards, self.dones, self.values = [], [], []

    def add(self, obs, action, logp, reward, done, value):
        self.obs.append(obs)
        self.actions.append(action)
        self.logp.append(logp.detach())
        self.rewards.append(reward)
        self.dones.append(done)
        self.values.append(value)

    def compute_gae(self, last_value):
        values = torch.stack(self.values)
        rewards = torch.stack(self.rewards)
        dones = torch.stack(self.dones)
        adv = torch.zeros_like(rewards)
        gae = 0.0
        for t in reversed(range(self.cfg.n_steps)):
            next_v = last_value if t == self.cfg.n_steps - 1 else values[t + 1]
            nonterminal = 1.0 - dones[t]
            delta = rewards[t] + self.cfg.gamma * next_v * nonterminal - values[t]
            gae = delta + self.cfg.gamma * self.cfg.gae_lambda * nonterminal * gae
            adv[t] = gae
        returns = adv + values
        return adv.detach(), returns.detach()

    def flat(self, adv, returns):
        obs = torch.stack(self.obs).flatten(0, 1)
        act = torch.stack(self.actions).flatten(0, 1)
        logp = torch.stack(self.logp).flatten(0, 1)
        return obs, act, logp, adv.flatten(), returns.flatten()


class PPOTrainer:
    def __init__(self, cfg: PPOConfig):
        self.cfg = cfg
        self.env = ToyEnv(cfg)
        self.ac = ActorCritic(cfg)
        self.opt = torch.optim.Adam(self.ac.parameters(), lr=cfg.lr, eps=1e-5)
        self.buffer = RolloutBuffer(cfg)
        self.obs = self.env.reset()

    def collect(self):
        self.buffer.reset()
        for _ in range(self.cfg.n_steps):
            action, logp, value = self.ac.act(self.obs)
            next_obs, reward, done = self.env.step(action)
            self.buffer.add(self.obs, action, logp, reward, done, value)
            self.obs = next_obs
        with torch.no_grad():
            last_value = self.ac.value(self.obs)
        return self.buffer.compute_gae(last_value)

    def ppo_loss(self, obs, act, old_logp, adv, ret):
        d = self.ac.dist(obs)
        logp = d.log_prob(act).sum(-1)
        ratio = torch.exp(logp - old_logp)
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        pg = -torch.min(ratio * adv, ratio.clamp(1 - self.cfg.clip_eps, 1 + self.cfg.clip_eps) * adv).mean()
        vf = F.mse_loss(self.ac.value(obs), ret)
        ent = d.entropy().sum(-1).mean()
        return pg + self.cfg.vf_coef * vf - self.cfg.ent_coef * ent, {"pg": pg.item(), "vf": vf.item(), "ent": ent.item()}

    def update(self, adv, returns):
        obs, act, old_logp, adv, ret = self.buffer.flat(adv, returns)
        n = obs.shape[0]
        mb = n // self.cfg.n_minibatches
        stats = {k: [] for k in self.cfg.log_keys}
        for epoch in range(self.cfg.n_epochs):
            perm = torch.randperm(n)
            for start in range(0, n, mb):
                idx = perm[start:start + mb]
                loss, info = self.ppo_loss(obs[idx], act[idx], old_logp[idx], adv[idx], ret[idx])
                self.opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(self.ac.parameters(), self.cfg.max_grad_norm)
                self.opt.step()
                for k in stats:
                    stats[k].append(info[k])
        return {k: float(np.mean(v)) for k, v in stats.items()}

    def train(self):
        for it in range(self.cfg.iterations):
            adv, returns = self.collect()
            stats = self.update(adv, returns)
            logger.info("iter %d | %s", it, " ".join(f"{k}={v:.3f}" for k, v in stats.items()))


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--iterations", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args([])


def main():
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    args = parse_args()
    torch.manual_seed(args.seed)
    cfg = PPOConfig(iterations=args.iterations, seed=args.seed)
    PPOTrainer(cfg).train()


if __name__ == "__main__":
    main()
