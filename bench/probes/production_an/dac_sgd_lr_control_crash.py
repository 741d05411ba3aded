# expect: no_grad_fn
# source: https://github.com/automl/DACBench/issues/95
"""Dynamic algorithm configuration of the SGD learning rate (DACBench SGD
benchmark with a DQN controller, TempoDAC-style).

`SGDEnv` trains a small regression network; each environment step applies the
learning rate chosen by the agent, runs one training batch and returns the
(log) training loss as reward.  A DQN agent with a replay buffer learns the
learning-rate schedule; every few episodes it is evaluated greedily on a
separate evaluation environment with another instance seed.
"""
import math
import random
from collections import deque
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SGD_DEFAULTS = SimpleNamespace(
    lr_choices=[1e-3, 3e-3, 1e-2, 3e-2, 1e-1], training_batch_size=32, dataset_size=256,
    cutoff=10, in_dim=8, hidden=[32, 32], seed=0,
)
DQN_DEFAULTS = SimpleNamespace(
    gamma=0.9, lr=1e-3, epsilon=0.2, buffer_size=1000, batch_size=16, train_episodes=3,
    eval_every=2, eval_eps=1, target_update=5, seed=0,
)


class SGDEnv:
    def __init__(self, config, instance_seed):
        self.config = config
        self.instance_seed = instance_seed
        self.model = None
        self.optimizer = None
        self.current_training_loss = None
        self.prev_training_loss = None
        self.loss_function = nn.MSELoss(reduction="none")

    @property
    def n_actions(self):
        return len(self.config.lr_choices)

    def _make_data(self):
        g = torch.Generator().manual_seed(self.instance_seed)
        X = torch.randn(self.config.dataset_size, self.config.in_dim, generator=g)
        w = torch.randn(self.config.in_dim, 1, generator=g)
        y = torch.sin(X @ w) + 0.05 * torch.randn(self.config.dataset_size, 1, generator=g)
        return X, y

    def _build_model(self):
        dims = [self.config.in_dim] + self.config.hidden
        layers = []
        for a, b in zip(dims[:-1], dims[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        layers.append(nn.Linear(dims[-1], 1))
        return nn.Sequential(*layers)

    def _next_batch(self):
        bs = self.config.training_batch_size
        if self.batch_index + bs > len(self.X):
            self.batch_index = 0
        sl = slice(self.batch_index, self.batch_index + bs)
        self.batch_index += bs
        return self.X[sl], self.y[sl]

    def _train_batch_(self):
        data, target = self._next_batch()
        output = self.model(data)
        loss = self.loss_function(output, target)
        loss.mean().backward()  # raises
        return loss.mean().detach()

    def get_default_reward(self):
        self.current_training_loss = self._train_batch_()
        return -math.log(self.current_training_loss.item() + 1e-8)

    def get_state(self):
        grad_norm = torch.sqrt(sum((p.grad ** 2).sum() for p in self.model.parameters() if p.grad is not None))
        prev = self.prev_training_loss if self.prev_training_loss is not None else self.current_training_loss
        return np.array([math.log(self.current_training_loss.item() + 1e-8),
                         math.log(prev.item() + 1e-8), grad_norm.item(),
                         self.step_count / self.config.cutoff], dtype=np.float32)

    def reset(self):
        torch.manual_seed(self.instance_seed)
        self.X, self.y = self._make_data()
        self.batch_index = 0
        self.step_count = 0
        self.model = self._build_model()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=self.config.lr_choices[0], momentum=0.9)
        self.optimizer.zero_grad()
        self.prev_training_loss = None
        self.get_default_reward()
        return self.get_state()

    def step(self, action):
        self.step_count += 1
        for g in self.optimizer.param_groups:
            g["lr"] = self.config.lr_choices[action]
        self.optimizer.step()
        self.optimizer.zero_grad()
        self.prev_training_loss = self.current_training_loss
        reward = self.get_default_reward()
        done = self.step_count >= self.config.cutoff
        return self.get_state(), reward, done, {}


class QNetwork(nn.Module):
    def __init__(self, state_dim, n_actions, hidden=50):
        super().__init__()
        self.fc1 = nn.Linear(state_dim, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, n_actions)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class ReplayBuffer:
    def __init__(self, size):
        self.data = deque(maxlen=size)

    def add(self, *transition):
        self.data.append(transition)

    def sample(self, batch_size):
        batch = random.sample(self.data, min(batch_size, len(self.data)))
        s, a, r, s2, d = map(np.array, zip(*batch))
        return (torch.from_numpy(s), torch.from_numpy(a).long(), torch.from_numpy(r).float(),
                torch.from_numpy(s2), torch.from_numpy(d.astype(np.float32)))


class DQN:
    def __init__(self, state_dim, n_actions, env, eval_env, cfg):
        self.cfg = cfg
        self._q = QNetwork(state_dim, n_actions)
        self._q_target = QNetwork(state_dim, n_actions)
        self._q_target.load_state_dict(self._q.state_dict())
        self._optimizer = torch.optim.Adam(self._q.parameters(), lr=cfg.lr)
        self._replay = ReplayBuffer(cfg.buffer_size)
        self._env, self._eval_env = env, eval_env
        self._n_actions = n_actions
        self._steps = 0

    def get_action(self, state, epsilon):
        if np.random.rand() < epsilon:
            return np.random.randint(self._n_actions)
        with torch.no_grad():
            return int(self._q(torch.from_numpy(state)).argmax().item())

    def update(self):
        s, a, r, s2, d = self._replay.sample(self.cfg.batch_size)
        with torch.no_grad():
            target = r + self.cfg.gamma * (1 - d) * self._q_target(s2).max(dim=1)[0]
        q = self._q(s).gather(1, a.unsqueeze(1)).squeeze(1)
        loss = F.smooth_l1_loss(q, target)
        self._optimizer.zero_grad()
        loss.backward()
        self._optimizer.step()
        self._steps += 1
        if self._steps % self.cfg.target_update == 0:
            self._q_target.load_state_dict(self._q.state_dict())
        return loss.item()

    def train(self, episodes):
        for e in range(episodes):
            s, done, ret = self._env.reset(), False, 0.0
            while not done:
                a = self.get_action(s, self.cfg.epsilon)
                s2, r, done, _ = self._env.step(a)
                self._replay.add(s, a, r, s2, done)
                self.update()
                s, ret = s2, ret + r
            print(f"train episode {e}: return {ret:.3f}")
            if (e + 1) % self.cfg.eval_every == 0:
                eval_r = self.eval(self.cfg.eval_eps)
                print(f"eval after episode {e}: mean return {eval_r:.3f}")

    @torch.no_grad()
    def eval(self, episodes):
        returns = []
        for _ in range(episodes):
            s, done, ret = self._eval_env.reset(), False, 0.0
            while not done:
                s, r, done, _ = self._eval_env.step(self.get_action(s, 0.0))
                ret += r
            returns.append(ret)
        return float(np.mean(returns))


def main():
    random.seed(DQN_DEFAULTS.seed)
    np.random.seed(DQN_DEFAULTS.seed)
    torch.manual_seed(DQN_DEFAULTS.seed)
    env = SGDEnv(SGD_DEFAULTS, instance_seed=1)
    eval_env = SGDEnv(SGD_DEFAULTS, instance_seed=2)
    agent = DQN(4, env.n_actions, env, eval_env, DQN_DEFAULTS)
    agent.train(DQN_DEFAULTS.train_episodes)


if __name__ == "__main__":
    main()
