# expect: clean
# source: https://discuss.pytorch.org/t/pytorch-runtimeerror-trying-to-backward-through-the-graph-a-second-time/191396
"""PPO from scratch on a small discrete control task.

Two value-function approximators, V(s) and Q(s, a), are classes with their own
forward pass, MSE loss and SGD method, and are fitted at every time step of the
episode.  The policy network computes the clipped surrogate at every step and,
at the end of the episode, performs stochastic gradient ascent (SGA) on the mean
surrogate.  A small Runner drives episodes, logging and evaluation.
"""
import argparse
import math
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def get_config():
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--max-steps", type=int, default=24)
    parser.add_argument("--gamma", type=float, default=0.97)
    parser.add_argument("--clip-eps", type=float, default=0.2)
    parser.add_argument("--policy-lr", type=float, default=3e-3)
    parser.add_argument("--value-lr", type=float, default=1e-2)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args([])


class LineWorld:
    """1-D cart that must reach x = 0; actions push left, stay, push right."""

    n_actions = 3
    obs_dim = 3

    def __init__(self, seed=0):
        self.rng = np.random.RandomState(seed)
        self.x = 0.0
        self.v = 0.0
        self.t = 0

    def reset(self):
        self.x = float(self.rng.uniform(-2.0, 2.0))
        self.v = 0.0
        self.t = 0
        return self._obs()

    def _obs(self):
        return np.array([self.x, self.v, math.tanh(self.x)], dtype=np.float32)

    def step(self, action):
        force = (action - 1) * 0.3
        self.v = 0.9 * self.v + force
        self.x = self.x + 0.1 * self.v
        self.t += 1
        reward = -abs(self.x) - 0.01 * abs(force)
        done = abs(self.x) < 0.05
        return self._obs(), reward, done


def mlp(inp, hidden, out):
    return nn.Sequential(nn.Linear(inp, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                         nn.Linear(hidden, out))


class StateValueFunction(nn.Module):
    """V(s)."""

    def __init__(self, obs_dim, hidden, lr):
        super().__init__()
        self.net = mlp(obs_dim, hidden, 1)
        self.optimizer = torch.optim.SGD(self.parameters(), lr=lr)

    def forward(self, state):
        return self.net(state).squeeze(-1)

    def mse_loss(self, prediction, target):
        return F.mse_loss(prediction, target)

    def sgd(self, loss):
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()


class ActionValueFunction(nn.Module):
    """Q(s, a) with a one-hot action input."""

    def __init__(self, obs_dim, n_actions, hidden, lr):
        super().__init__()
        self.n_actions = n_actions
        self.net = mlp(obs_dim + n_actions, hidden, 1)
        self.optimizer = torch.optim.SGD(self.parameters(), lr=lr)

    def forward(self, state, action):
        one_hot = F.one_hot(torch.as_tensor(action), self.n_actions).float()
        return self.net(torch.cat([state, one_hot], dim=-1)).squeeze(-1)

    def mse_loss(self, prediction, target):
        return F.mse_loss(prediction, target)

    def sgd(self, loss):
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()


class PolicyNetwork(nn.Module):
    def __init__(self, obs_dim, n_actions, hidden, lr, clip_eps):
        super().__init__()
        self.net = mlp(obs_dim, hidden, n_actions)
        self.clip_eps = clip_eps
        self.optimizer = torch.optim.Adam(self.parameters(), lr=lr)
        self.old_net = mlp(obs_dim, hidden, n_actions)
        self.sync_old()

    def sync_old(self):
        self.old_net.load_state_dict(self.net.state_dict())

    def forward(self, state):
        return torch.distributions.Categorical(logits=self.net(state))

    def act(self, state):
        with torch.no_grad():
            dist = self.forward(state)
            action = dist.sample()
        return int(action.item())

    def clipped_surrogate(self, state, action, advantage):
        new_logp = self.forward(state).log_prob(torch.as_tensor(action))
        with torch.no_grad():
            old_logp = torch.distributions.Categorical(logits=self.old_net(state)).log_prob(
                torch.as_tensor(action))
        ratio = torch.exp(new_logp - old_logp)
        unclipped = ratio * advantage
        clipped = torch.clamp(ratio, 1 - self.clip_eps, 1 + self.clip_eps) * advantage
        return torch.min(unclipped, clipped)

    def sga(self, surrogates):
        # gradient ascent on the expected clipped surrogate
        objective = torch.stack(surrogates).mean()
        sga_loss = -objective
        self.optimizer.zero_grad()
        sga_loss.backward()
        self.optimizer.step()
        self.sync_old()
        return float(objective.item())


class Runner:
    def __init__(self, cfg):
        self.cfg = cfg
        self.env = LineWorld(cfg.seed)
        self.v_fn = StateValueFunction(LineWorld.obs_dim, cfg.hidden, cfg.value_lr)
        self.q_fn = ActionValueFunction(LineWorld.obs_dim, LineWorld.n_actions, cfg.hidden, cfg.value_lr)
        self.policy = PolicyNetwork(LineWorld.obs_dim, LineWorld.n_actions, cfg.hidden, cfg.policy_lr,
                                    cfg.clip_eps)
        self.history = []

    def update_value_functions(self, state, action, reward, next_state, done):
        with torch.no_grad():
            bootstrap = 0.0 if done else self.cfg.gamma * self.v_fn(next_state)
            target = torch.as_tensor(reward, dtype=torch.float32) + bootstrap
        v = self.v_fn(state)
        q = self.q_fn(state, action)
        advantage = (q - v).detach()
        self.v_fn.sgd(self.v_fn.mse_loss(v, target))
        self.q_fn.sgd(self.q_fn.mse_loss(q, target))
        return advantage

    def run_episode(self):
        state = torch.from_numpy(self.env.reset())
        surrogates, ret = [], 0.0
        for _ in range(self.cfg.max_steps):
            action = self.policy.act(state)
            next_obs, reward, done = self.env.step(action)
            next_state = torch.from_numpy(next_obs)
            advantage = self.update_value_functions(state, action, reward, next_state, done)
            surrogates.append(self.policy.clipped_surrogate(state, action, advantage))
            ret += reward
            state = next_state
            if done:
                break
        objective = self.policy.sga(surrogates)
        return ret, objective, len(surrogates)

    def evaluate(self, episodes=2):
        returns = []
        for _ in range(episodes):
            state = torch.from_numpy(self.env.reset())
            total = 0.0
            for _ in range(self.cfg.max_steps):
                with torch.no_grad():
                    action = int(self.policy(state).probs.argmax().item())
                obs, reward, done = self.env.step(action)
                total += reward
                state = torch.from_numpy(obs)
                if done:
                    break
            returns.append(total)
        return float(np.mean(returns))

    def train(self):
        for episode in range(self.cfg.episodes):
            ret, objective, steps = self.run_episode()
            self.history.append(ret)
            print(f"episode {episode}: return {ret:.3f} surrogate {objective:.4f} steps {steps}")
        print(f"eval return {self.evaluate():.3f}")


def main():
    cfg = get_config()
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    Runner(cfg).train()


if __name__ == "__main__":
    main()
