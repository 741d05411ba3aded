# expect: freed_graph
# source: https://github.com/pytorch/examples/issues/151
"""REINFORCE with a running-reward baseline on a curriculum of corridor tasks.

The agent walks a 1-D corridor towards a goal; the corridor gets longer whenever
the running reward passes a promotion threshold.  To reduce the variance of the
policy-gradient estimate, each update averages the loss over a small window of
the most recent episodes kept in an experience pool.
"""
import random
from collections import deque
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Categorical

cfg = SimpleNamespace(
    seed=543,
    gamma=0.97,
    lr=1e-2,
    hidden=32,
    n_episodes=8,
    window=3,
    pool_size=16,
    baseline_momentum=0.9,
    curriculum=SimpleNamespace(start_len=4, max_len=10, promote_at=0.5, step=2),
    max_steps_factor=3,
    entropy_coef=0.01,
    log_interval=1,
)


class CorridorEnv:
    """Agent starts at cell 0 and must reach cell `length - 1`. Actions: 0=left, 1=right, 2=stay."""

    n_actions = 3
    obs_dim = 4

    def __init__(self, length, rng):
        self.length = length
        self.rng = rng
        self.pos = 0
        self.t = 0

    def set_length(self, length):
        self.length = length

    def _obs(self):
        frac = self.pos / max(1, self.length - 1)
        return np.array([frac, 1.0 - frac, self.t / (cfg.max_steps_factor * self.length), 1.0],
                        dtype=np.float32)

    def reset(self):
        self.pos = 0
        self.t = 0
        return self._obs()

    def step(self, action):
        self.t += 1
        if action == 0:
            self.pos = max(0, self.pos - 1)
        elif action == 1:
            self.pos = min(self.length - 1, self.pos + 1)
        if self.rng.random() < 0.05:
            self.pos = max(0, self.pos - 1)
        done = self.pos == self.length - 1 or self.t >= cfg.max_steps_factor * self.length
        reward = 1.0 if self.pos == self.length - 1 else -0.01
        return self._obs(), reward, done


class Policy(nn.Module):
    def __init__(self, obs_dim, n_actions, hidden):
        super().__init__()
        self.affine1 = nn.Linear(obs_dim, hidden)
        self.dropout = nn.Dropout(p=0.1)
        self.affine2 = nn.Linear(hidden, n_actions)

    def forward(self, x):
        x = self.dropout(F.relu(self.affine1(x)))
        return F.softmax(self.affine2(x), dim=-1)


class CurriculumScheduler:
    def __init__(self, c):
        self.c = c
        self.length = c.start_len
        self.promotions = []

    def update(self, running_reward, episode):
        if running_reward > self.c.promote_at and self.length < self.c.max_len:
            self.length = min(self.c.max_len, self.length + self.c.step)
            self.promotions.append((episode, self.length))
            return True
        return False


class ReinforceAgent:
    def __init__(self, c):
        self.c = c
        self.policy = Policy(CorridorEnv.obs_dim, CorridorEnv.n_actions, c.hidden)
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=c.lr)
        self.saved_log_probs = []
        self.saved_entropies = []
        self.rewards = []
        self.pool = deque(maxlen=c.pool_size)
        self.baseline = 0.0
        self.eps = np.finfo(np.float32).eps.item()

    def select_action(self, state):
        state = torch.from_numpy(state).float().unsqueeze(0)
        probs = self.policy(state)
        m = Categorical(probs)
        action = m.sample()
        self.saved_log_probs.append(m.log_prob(action))
        self.saved_entropies.append(m.entropy())
        return action.item()

    def _discounted_returns(self):
        R, returns = 0.0, []
        for r in self.rewards[::-1]:
            R = r + self.c.gamma * R
            returns.insert(0, R)
        return torch.tensor(returns)

    def close_episode(self):
        returns = self._discounted_returns()
        self.pool.append({
            "log_probs": list(self.saved_log_probs),
            "entropies": list(self.saved_entropies),
            "returns": returns,
            "ep_return": float(sum(self.rewards)),
        })
        del self.rewards[:]
        del self.saved_log_probs[:]
        del self.saved_entropies[:]

    def _episode_loss(self, ep):
        adv = ep["returns"] - self.baseline
        adv = (adv - adv.mean()) / (adv.std(unbiased=False) + self.eps)
        terms = [-lp * a for lp, a in zip(ep["log_probs"], adv)]
        ent = torch.cat(ep["entropies"]).mean()
        return torch.cat(terms).sum() - self.c.entropy_coef * ent

    def finish_episode(self):
        batch = list(self.pool)[-self.c.window:]
        policy_loss = torch.stack([self._episode_loss(ep) for ep in batch]).mean()
        self.optimizer.zero_grad()
        policy_loss.backward()  # raises
        self.optimizer.step()
        mean_ret = float(np.mean([ep["ep_return"] for ep in batch]))
        m = self.c.baseline_momentum
        self.baseline = m * self.baseline + (1 - m) * mean_ret
        return policy_loss.item()


def main():
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    sched = CurriculumScheduler(cfg.curriculum)
    env = CorridorEnv(sched.length, rng)
    agent = ReinforceAgent(cfg)
    running_reward = 0.0
    for i_episode in range(1, cfg.n_episodes + 1):
        state, ep_reward = env.reset(), 0.0
        while True:
            action = agent.select_action(state)
            state, reward, done = env.step(action)
            agent.rewards.append(reward)
            ep_reward += reward
            if done:
                break
        running_reward = 0.05 * ep_reward + (1 - 0.05) * running_reward
        agent.close_episode()
        loss = agent.finish_episode()
        if sched.update(running_reward, i_episode):
            env.set_length(sched.length)
            print(f"promoted to corridor length {sched.length}")
        if i_episode % cfg.log_interval == 0:
            print(f"Episode {i_episode}\tLast reward: {ep_reward:.2f}\tRunning: {running_reward:.3f}"
                  f"\tloss {loss:.3f}\tlen {env.length}")


if __name__ == "__main__":
    main()
