# expect: clean
# source: https://github.com/thu-ml/tianshou/issues/37
"""Soft Actor-Critic on a pendulum swing-up task, using the SACPolicy of the
installed `tianshou` library with the ActorProb / Critic networks from the
local net.py; transitions come from a small numpy pendulum simulator."""
import numpy as np


class Batch(object):
    """The internal data structure to pass any kind of data to other methods."""
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)

    def __len__(self):
        return len(next(iter(self.__dict__.values())))

    def __getitem__(self, index):
        return Batch(**{k: v[index] for k, v in self.__dict__.items()})

    def sample(self, batch_size):
        indice = np.random.choice(len(self), batch_size)
        return self[indice], indice


import torch
import numpy as np
from copy import deepcopy
import torch.nn.functional as F



class SACPolicy(torch.nn.Module):
    """Implementation of Soft Actor-Critic. arXiv:1812.05905"""

    def __init__(self, actor, actor_optim, critic1, critic1_optim,
                 critic2, critic2_optim, tau=0.005, gamma=0.99,
                 alpha=0.2, action_range=None, **kwargs):
        super().__init__()
        self.actor, self.actor_optim = actor, actor_optim
        self.critic1, self.critic1_old = critic1, deepcopy(critic1).eval()
        self.critic1_optim = critic1_optim
        self.critic2, self.critic2_old = critic2, deepcopy(critic2).eval()
        self.critic2_optim = critic2_optim
        self._tau, self._gamma, self._alpha = tau, gamma, alpha
        self._range = action_range
        self._action_bias = (action_range[0] + action_range[1]) / 2
        self._action_scale = (action_range[1] - action_range[0]) / 2
        self.__eps = np.finfo(np.float32).eps.item()

    def sync_weight(self):
        for old, new in [(self.critic1_old, self.critic1), (self.critic2_old, self.critic2)]:
            for o, n in zip(old.parameters(), new.parameters()):
                o.data.copy_(o.data * (1 - self._tau) + n.data * self._tau)

    def forward(self, batch, state=None, input='obs', **kwargs):
        obs = getattr(batch, input)
        logits, h = self.actor(obs, state=state)
        assert isinstance(logits, tuple)
        dist = torch.distributions.Normal(*logits)
        x = dist.rsample()
        y = torch.tanh(x)
        act = y * self._action_scale + self._action_bias
        log_prob = dist.log_prob(x) - torch.log(
            self._action_scale * (1 - y.pow(2)) + self.__eps)
        act = act.clamp(self._range[0], self._range[1])
        return Batch(logits=logits, act=act, state=h, dist=dist, log_prob=log_prob)

    def learn(self, batch, **kwargs):
        with torch.no_grad():
            obs_next_result = self(batch, input='obs_next')
            a_ = obs_next_result.act
            dev = a_.device
            batch.act = torch.tensor(batch.act, dtype=torch.float, device=dev)
            target_q = torch.min(
                self.critic1_old(batch.obs_next, a_),
                self.critic2_old(batch.obs_next, a_),
            ) - self._alpha * obs_next_result.log_prob
            rew = torch.tensor(batch.rew, dtype=torch.float, device=dev)[:, None]
            done = torch.tensor(batch.done, dtype=torch.float, device=dev)[:, None]
            target_q = (rew + (1. - done) * self._gamma * target_q)
        # critic 1
        current_q1 = self.critic1(batch.obs, batch.act)
        critic1_loss = F.mse_loss(current_q1, target_q)
        self.critic1_optim.zero_grad()
        critic1_loss.backward()
        self.critic1_optim.step()
        # critic 2
        current_q2 = self.critic2(batch.obs, batch.act)
        critic2_loss = F.mse_loss(current_q2, target_q)
        self.critic2_optim.zero_grad()
        critic2_loss.backward()
        self.critic2_optim.step()
        # actor
        obs_result = self(batch)
        a = obs_result.act
        current_q1a = self.critic1(batch.obs, a)
        current_q2a = self.critic2(batch.obs, a)
        actor_loss = (self._alpha * obs_result.log_prob - torch.min(
            current_q1a, current_q2a)).mean()
        self.actor_optim.zero_grad()
        actor_loss.backward()
        self.actor_optim.step()
        self.sync_weight()
        return {'loss/actor': actor_loss.item(), 'loss/critic1': critic1_loss.item(),
                'loss/critic2': critic2_loss.item()}


import torch
import numpy as np
from torch import nn


class ActorProb(nn.Module):
    def __init__(self, layer_num, state_shape, action_shape, max_action, device='cpu'):
        super().__init__()
        self.device = device
        self.model = [nn.Linear(np.prod(state_shape), 128), nn.ReLU(inplace=True)]
        for i in range(layer_num):
            self.model += [nn.Linear(128, 128), nn.ReLU(inplace=True)]
        self.model = nn.Sequential(*self.model)
        self.mu = nn.Linear(128, np.prod(action_shape))
        self.sigma = nn.Parameter(torch.zeros(np.prod(action_shape), 1))
        self._max = max_action

    def forward(self, s, **kwargs):
        if not isinstance(s, torch.Tensor):
            s = torch.tensor(s, device=self.device, dtype=torch.float)
        batch = s.shape[0]
        s = s.view(batch, -1)
        logits = self.model(s)
        mu = self.mu(logits)
        sigma = (self.sigma.view(1, -1) + torch.zeros_like(mu)).exp()
        return (mu, sigma), None


class Critic(nn.Module):
    def __init__(self, layer_num, state_shape, action_shape=0, device='cpu'):
        super().__init__()
        self.device = device
        self.model = [nn.Linear(np.prod(state_shape) + np.prod(action_shape), 128),
                      nn.ReLU(inplace=True)]
        for i in range(layer_num):
            self.model += [nn.Linear(128, 128), nn.ReLU(inplace=True)]
        self.model += [nn.Linear(128, 1)]
        self.model = nn.Sequential(*self.model)

    def forward(self, s, a=None):
        if not isinstance(s, torch.Tensor):
            s = torch.tensor(s, device=self.device, dtype=torch.float)
        if a is not None and not isinstance(a, torch.Tensor):
            a = torch.tensor(a, device=self.device, dtype=torch.float)
        batch = s.shape[0]
        s = s.view(batch, -1)
        if a is not None:
            a = a.view(batch, -1)
            s = torch.cat([s, a], dim=1)
        logits = self.model(s)
        return logits


import argparse

import numpy as np
import torch



def pendulum_transitions(n, rng):
    th = rng.uniform(-np.pi, np.pi, n)
    thdot = rng.uniform(-8, 8, n)
    u = rng.uniform(-2, 2, (n, 1))
    newthdot = np.clip(thdot + (3 * 10 / 2 * np.sin(th) + 3. * u[:, 0]) * 0.05, -8, 8)
    newth = th + newthdot * 0.05
    rew = -(((th + np.pi) % (2 * np.pi) - np.pi) ** 2 + .1 * thdot ** 2 + .001 * u[:, 0] ** 2)
    obs = np.stack([np.cos(th), np.sin(th), thdot], 1).astype(np.float32)
    obs_next = np.stack([np.cos(newth), np.sin(newth), newthdot], 1).astype(np.float32)
    return Batch(obs=obs, act=u.astype(np.float32), rew=rew.astype(np.float32), done=np.zeros(n), obs_next=obs_next)


args = argparse.Namespace(actor_lr=3e-4, critic_lr=1e-3, batch_size=64, layer_num=1)

np.random.seed(0)
torch.manual_seed(0)
state_shape, action_shape, max_action = (3,), (1,), 2.0
actor = ActorProb(args.layer_num, state_shape, action_shape, max_action)
actor_optim = torch.optim.Adam(actor.parameters(), lr=args.actor_lr)
critic1 = Critic(args.layer_num, state_shape, action_shape)
critic1_optim = torch.optim.Adam(critic1.parameters(), lr=args.critic_lr)
critic2 = Critic(args.layer_num, state_shape, action_shape)
critic2_optim = torch.optim.Adam(critic2.parameters(), lr=args.critic_lr)
policy = SACPolicy(
    actor, actor_optim, critic1, critic1_optim, critic2, critic2_optim,
    tau=0.005, gamma=0.99, alpha=0.2, action_range=[-max_action, max_action])

buffer = pendulum_transitions(2000, np.random.RandomState(0))
for step in range(5):
    batch, _ = buffer.sample(args.batch_size)
    losses = policy.learn(batch)
    print(step, {k: round(v, 4) for k, v in losses.items()})
