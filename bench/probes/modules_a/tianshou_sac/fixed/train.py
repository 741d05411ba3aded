# expect: clean
# source: https://github.com/thu-ml/tianshou/issues/37
"""Soft Actor-Critic on a pendulum swing-up task, using the SACPolicy of the
installed `tianshou` library with the ActorProb / Critic networks from the
local net.py; transitions come from a small numpy pendulum simulator."""
import argparse

import numpy as np
import torch

from tianshou import Batch, SACPolicy
from net import ActorProb, Critic


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
