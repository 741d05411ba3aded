# expect: inplace_version
# source: https://github.com/MrSyee/pg-is-all-you-need/issues/30
"""Soft Actor-Critic with twin Q critics, Polyak-averaged target critics and
automatic entropy tuning, on a small continuous point-mass reaching task.
"""
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Normal

LOG_STD_MIN, LOG_STD_MAX = -20, 2


@dataclass
class SACConfig:
    obs_dim: int = 4
    act_dim: int = 2
    hidden: int = 64
    gamma: float = 0.99
    tau: float = 5e-3
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    alpha_lr: float = 3e-4
    buffer_size: int = 10_000
    batch_size: int = 32
    initial_random_steps: int = 40
    num_frames: int = 80
    episode_len: int = 25
    seed: int = 777


class PointMassEnv:
    """Move a point in the plane towards a random goal; actions are clipped velocities."""

    def __init__(self, episode_len, rng):
        self.episode_len = episode_len
        self.rng = rng

    def reset(self):
        self.pos = self.rng.uniform(-1, 1, size=2).astype(np.float32)
        self.goal = self.rng.uniform(-1, 1, size=2).astype(np.float32)
        self.t = 0
        return np.concatenate([self.pos, self.goal])

    def step(self, action):
        self.t += 1
        self.pos = np.clip(self.pos + 0.1 * np.clip(action, -1, 1), -1.5, 1.5).astype(np.float32)
        dist = float(np.linalg.norm(self.pos - self.goal))
        reward = -dist - 0.01 * float(np.square(action).sum())
        done = dist < 0.05 or self.t >= self.episode_len
        return np.concatenate([self.pos, self.goal]), reward, done


class ReplayBuffer:
    def __init__(self, obs_dim, act_dim, size, batch_size, rng):
        self.obs = np.zeros((size, obs_dim), np.float32)
        self.next_obs = np.zeros((size, obs_dim), np.float32)
        self.acts = np.zeros((size, act_dim), np.float32)
        self.rews = np.zeros((size, 1), np.float32)
        self.done = np.zeros((size, 1), np.float32)
        self.max_size, self.batch_size, self.rng = size, batch_size, rng
        self.ptr, self.size = 0, 0

    def store(self, obs, act, rew, next_obs, done):
        i = self.ptr
        self.obs[i], self.acts[i], self.rews[i], self.next_obs[i], self.done[i] = obs, act, rew, next_obs, done
        self.ptr = (self.ptr + 1) % self.max_size
        self.size = min(self.size + 1, self.max_size)

    def sample_batch(self):
        idxs = self.rng.choice(self.size, size=self.batch_size, replace=False)
        return {k: torch.as_tensor(getattr(self, k)[idxs]) for k in ("obs", "acts", "rews", "next_obs", "done")}

    def __len__(self):
        return self.size


class Actor(nn.Module):
    def __init__(self, obs_dim, act_dim, hidden):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(obs_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.mu = nn.Linear(hidden, act_dim)
        self.log_std = nn.Linear(hidden, act_dim)

    def forward(self, obs):
        h = self.net(obs)
        mu = self.mu(h)
        log_std = torch.clamp(self.log_std(h), LOG_STD_MIN, LOG_STD_MAX)
        dist = Normal(mu, log_std.exp())
        z = dist.rsample()
        action = torch.tanh(z)
        log_prob = dist.log_prob(z) - torch.log(1 - action.pow(2) + 1e-7)
        return action, log_prob.sum(-1, keepdim=True)


class TwinCritic(nn.Module):
    def __init__(self, obs_dim, act_dim, hidden):
        super().__init__()

        def q():
            return nn.Sequential(nn.Linear(obs_dim + act_dim, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))

        self.q1, self.q2 = q(), q()

    def forward(self, obs, act):
        x = torch.cat([obs, act], dim=-1)
        return self.q1(x), self.q2(x)


class SACAgent:
    def __init__(self, cfg: SACConfig, rng):
        self.cfg = cfg
        self.actor = Actor(cfg.obs_dim, cfg.act_dim, cfg.hidden)
        self.critic = TwinCritic(cfg.obs_dim, cfg.act_dim, cfg.hidden)
        self.critic_target = TwinCritic(cfg.obs_dim, cfg.act_dim, cfg.hidden)
        self.critic_target.load_state_dict(self.critic.state_dict())
        for p in self.critic_target.parameters():
            p.requires_grad_(False)
        self.target_entropy = -float(cfg.act_dim)
        self.log_alpha = torch.zeros(1, requires_grad=True)
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=cfg.actor_lr)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=cfg.critic_lr)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=cfg.alpha_lr)
        self.memory = ReplayBuffer(cfg.obs_dim, cfg.act_dim, cfg.buffer_size, cfg.batch_size, rng)
        self.total_step = 0
        self.rng = rng

    @property
    def alpha(self):
        return self.log_alpha.exp()

    def select_action(self, obs):
        if self.total_step < self.cfg.initial_random_steps:
            return self.rng.uniform(-1, 1, size=self.cfg.act_dim).astype(np.float32)
        with torch.no_grad():
            action, _ = self.actor(torch.as_tensor(obs).unsqueeze(0))
        return action.squeeze(0).numpy()

    def _optimize(self, optimizer, loss):
        optimizer.zero_grad()
        loss.backward()  # raises
        optimizer.step()

    def _soft_update(self):
        tau = self.cfg.tau
        with torch.no_grad():
            for t, s in zip(self.critic_target.parameters(), self.critic.parameters()):
                t.mul_(1 - tau).add_(tau * s)

    def compute_losses(self, batch):
        obs, act, rew = batch["obs"], batch["acts"], batch["rews"]
        next_obs, done = batch["next_obs"], batch["done"]
        alpha = self.alpha.detach()
        with torch.no_grad():
            next_action, next_logp = self.actor(next_obs)
            q1_t, q2_t = self.critic_target(next_obs, next_action)
            q_target = rew + self.cfg.gamma * (1 - done) * (torch.min(q1_t, q2_t) - alpha * next_logp)
        q1, q2 = self.critic(obs, act)
        critic_loss = F.mse_loss(q1, q_target) + F.mse_loss(q2, q_target)
        new_action, logp = self.actor(obs)
        q1_pi, q2_pi = self.critic(obs, new_action)
        actor_loss = (alpha * logp - torch.min(q1_pi, q2_pi)).mean()
        alpha_loss = -(self.log_alpha * (logp + self.target_entropy).detach()).mean()
        return critic_loss, actor_loss, alpha_loss

    def update_model(self):
        batch = self.memory.sample_batch()
        critic_loss, actor_loss, alpha_loss = self.compute_losses(batch)
        self._optimize(self.critic_optimizer, critic_loss)
        self._optimize(self.actor_optimizer, actor_loss)
        self._optimize(self.alpha_optimizer, alpha_loss)
        self._soft_update()
        return actor_loss.item(), critic_loss.item(), alpha_loss.item()


def train(cfg: SACConfig):
    rng = np.random.default_rng(cfg.seed)
    torch.manual_seed(cfg.seed)
    env = PointMassEnv(cfg.episode_len, rng)
    agent = SACAgent(cfg, rng)
    obs, score, scores, losses = env.reset(), 0.0, [], []
    for agent.total_step in range(1, cfg.num_frames + 1):
        action = agent.select_action(obs)
        next_obs, reward, done = env.step(action)
        agent.memory.store(obs, action, reward, next_obs, float(done))
        obs, score = next_obs, score + reward
        if done:
            scores.append(score)
            obs, score = env.reset(), 0.0
        if len(agent.memory) >= cfg.batch_size and agent.total_step > cfg.initial_random_steps:
            losses.append(agent.update_model())
    if losses:
        a, c, al = np.mean(losses, axis=0)
        print(f"episodes={len(scores)} actor={a:.3f} critic={c:.3f} alpha_loss={al:.3f} alpha={agent.alpha.item():.3f}")


if __name__ == "__main__":
    train(SACConfig())
