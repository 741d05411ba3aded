# expect: inplace_version
# source: https://github.com/clvrai/spirl/issues/6
"""Skill-prior RL (SPiRL-style) downstream training of a high-level policy.

A SAC agent whose entropy term is replaced by the KL divergence to a learned
(frozen) skill prior. Twin critics with target networks, automatic tuning of
the divergence multiplier alpha, a replay buffer, an observation normalizer and
a warm-up phase of random skills before updates start. The environment is a
small synthetic block-stacking stand-in; CPU only.
"""
import random

import numpy as np
import torch
import torch.nn as nn
from torch.distributions import Normal, kl_divergence


class AttrDict(dict):
    __getattr__ = dict.__getitem__

    def __setattr__(self, k, v):
        self[k] = v


class ParamDict(AttrDict):
    def overwrite(self, new):
        for k, v in new.items():
            self[k] = v
        return self


def mlp(i, o, h=32):
    return nn.Sequential(nn.Linear(i, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, o))


class TensorModule(nn.Module):
    def __init__(self, t):
        super().__init__()
        self.t = nn.Parameter(t)

    def forward(self):
        return self.t


class SkillPriorPolicy(nn.Module):
    def __init__(self, hp):
        super().__init__()
        self.net = mlp(hp.input_dim, 2 * hp.action_dim)
        self.prior = mlp(hp.input_dim, 2 * hp.action_dim)
        self.prior.requires_grad_(False)
        self.action_dim = hp.action_dim

    def _dist(self, net, obs):
        mu, log_sigma = net(obs).chunk(2, -1)
        return Normal(mu, log_sigma.clamp(-5, 2).exp())

    def forward(self, obs):
        dist = self._dist(self.net, obs)
        action = dist.rsample()
        prior_dist = self._dist(self.prior, obs)
        return AttrDict(action=action, dist=dist, log_prob=dist.log_prob(action).sum(-1),
                        prior_divergence=kl_divergence(dist, prior_dist).sum(-1))


class Critic(nn.Module):
    def __init__(self, hp):
        super().__init__()
        self.net = mlp(hp.input_dim + hp.action_dim, 1)

    def forward(self, obs, act):
        return AttrDict(q=self.net(torch.cat([obs, act], -1)))


class ReplayBuffer:
    def __init__(self, capacity=1000):
        self.storage, self.capacity = [], capacity

    def append(self, batch):
        for i in range(len(batch.observation)):
            self.storage.append({k: v[i] for k, v in batch.items()})
        self.storage = self.storage[-self.capacity:]

    def sample(self, n_samples):
        idx = np.random.randint(0, len(self.storage), n_samples)
        return AttrDict({k: np.stack([self.storage[i][k] for i in idx]) for k in self.storage[0]})

    def __len__(self):
        return len(self.storage)


class RunningNormalizer:
    def __init__(self, dim):
        self.mean, self.var, self.n = np.zeros(dim), np.ones(dim), 1e-4

    def update(self, x):
        m, v, n = x.mean(0), x.var(0), x.shape[0]
        tot = self.n + n
        self.mean = self.mean + (m - self.mean) * n / tot
        self.var = (self.var * self.n + v * n) / tot
        self.n = tot

    def __call__(self, x):
        return np.clip((x - self.mean) / np.sqrt(self.var + 1e-8), -5, 5)


def map2torch(d):
    return AttrDict({k: torch.as_tensor(v, dtype=torch.float32) for k, v in d.items()})


class SACAgent:
    def __init__(self, config):
        self._hp = ParamDict(critic_lr=3e-4, policy_lr=3e-4, reward_scale=1.0, discount_factor=0.99,
                             batch_size=16, update_iterations=1, target_network_update_factor=5e-3).overwrite(config)
        self.policy = SkillPriorPolicy(self._hp.policy_params)
        self.policy_opt = torch.optim.Adam(self.policy.parameters(), lr=self._hp.policy_lr)
        self.critics = nn.ModuleList([Critic(self._hp.policy_params) for _ in range(2)])
        self.critic_targets = nn.ModuleList([Critic(self._hp.policy_params) for _ in range(2)])
        for t, s in zip(self.critic_targets, self.critics):
            t.load_state_dict(s.state_dict())
        self.critic_opts = [torch.optim.Adam(c.parameters(), lr=self._hp.critic_lr) for c in self.critics]
        self._log_alpha = TensorModule(torch.zeros(1))
        self.alpha_opt = torch.optim.Adam(self._log_alpha.parameters(), lr=self._hp.policy_lr)
        self.replay_buffer = ReplayBuffer()
        self._obs_normalizer = RunningNormalizer(self._hp.policy_params.input_dim)
        self._update_steps = 0

    @property
    def alpha(self):
        return self._log_alpha().exp()

    def add_experience(self, experience_batch):
        self.replay_buffer.append(experience_batch)
        self._obs_normalizer.update(experience_batch.observation)

    def act(self, obs):
        with torch.no_grad():
            out = self.policy(torch.as_tensor(self._obs_normalizer(obs), dtype=torch.float32)[None])
        return out.action[0].numpy()

    def _perform_update(self, loss, opt, network):
        opt.zero_grad()
        loss.backward()  # raises
        torch.nn.utils.clip_grad_norm_(network.parameters(), 10.0)
        opt.step()

    def _soft_update_target_network(self, target, source):
        tau = self._hp.target_network_update_factor
        for tp, sp in zip(target.parameters(), source.parameters()):
            tp.data.copy_(tau * sp.data + (1 - tau) * tp.data)

    def update(self, experience_batch):
        self.add_experience(experience_batch)
        info = AttrDict()
        for _ in range(self._hp.update_iterations):
            batch = self.replay_buffer.sample(n_samples=self._hp.batch_size)
            batch.observation = self._obs_normalizer(batch.observation)
            batch.observation_next = self._obs_normalizer(batch.observation_next)
            batch = map2torch(batch)
            policy_output = self.policy(batch.observation)

            alpha_loss = self._compute_alpha_loss(policy_output)
            self._perform_update(alpha_loss, self.alpha_opt, self._log_alpha)

            policy_loss = self._compute_policy_loss(batch, policy_output)

            with torch.no_grad():
                policy_output_next = self.policy(batch.observation_next)
                value_next = self._compute_next_value(batch, policy_output_next)
                q_target = batch.reward * self._hp.reward_scale + \
                    (1 - batch.done) * self._hp.discount_factor * value_next

            qs = [c(batch.observation, batch.action).q.squeeze(-1) for c in self.critics]
            critic_losses = [0.5 * (q - q_target).pow(2).mean() for q in qs]

            # update critic networks
            [self._perform_update(critic_loss, critic_opt, critic)
             for critic_loss, critic_opt, critic in zip(critic_losses, self.critic_opts, self.critics)]

            # update target networks
            [self._soft_update_target_network(t, c) for t, c in zip(self.critic_targets, self.critics)]

            # update policy network on policy loss
            self._perform_update(policy_loss, self.policy_opt, self.policy)

            info = AttrDict(policy_loss=policy_loss.item(), alpha_loss=alpha_loss.item(),
                            critic_loss_1=critic_losses[0].item(), alpha=self.alpha.item())
        return info

    def _compute_alpha_loss(self, policy_output):
        self._update_steps += 1
        return self.alpha * (self._hp.target_divergence - policy_output.prior_divergence).detach().mean()

    def _compute_policy_loss(self, batch, policy_output):
        q_est = torch.min(*[c(batch.observation, policy_output.action).q for c in self.critics])
        policy_loss = -1 * q_est + self.alpha * policy_output.prior_divergence[:, None]
        return policy_loss.mean()

    def _compute_next_value(self, batch, policy_output):
        q_next = torch.min(*[c(batch.observation_next, policy_output.action).q for c in self.critic_targets])
        return (q_next - self.alpha * policy_output.prior_divergence[:, None]).squeeze(-1)


class BlockStackEnv:
    def __init__(self, obs_dim, action_dim, horizon=10):
        self.obs_dim, self.action_dim, self.horizon = obs_dim, action_dim, horizon

    def reset(self):
        self.t, self.state = 0, np.random.randn(self.obs_dim) * 0.1
        return self.state.copy()

    def step(self, action):
        self.t += 1
        self.state[: self.action_dim] += 0.1 * np.tanh(action)
        reward = -float(np.square(self.state[: self.action_dim] - 0.5).sum())
        return self.state.copy(), reward, self.t >= self.horizon


class RLTrainer:
    def __init__(self, conf):
        self.conf = conf
        self.env = BlockStackEnv(conf.obs_dim, conf.action_dim)
        self.agent = SACAgent(conf.agent)

    def collect(self, obs, warmup):
        a = np.random.randn(self.conf.action_dim) if warmup else self.agent.act(obs)
        nxt, r, done = self.env.step(a)
        batch = AttrDict(observation=obs[None], action=a[None].astype(np.float32), reward=np.array([r]),
                         observation_next=nxt[None], done=np.array([float(done)]))
        return batch, (self.env.reset() if done else nxt)

    def train(self):
        obs = self.env.reset()
        for step in range(self.conf.n_warmup + self.conf.n_steps):
            batch, obs = self.collect(obs, warmup=step < self.conf.n_warmup)
            if step < self.conf.n_warmup:
                self.agent.add_experience(batch)
                continue
            info = self.agent.update(batch)
            print(f"step {step} " + " ".join(f"{k}={v:.3f}" for k, v in info.items()))


def main():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    obs_dim, action_dim = 8, 3
    policy_params = AttrDict(input_dim=obs_dim, action_dim=action_dim)
    conf = AttrDict(obs_dim=obs_dim, action_dim=action_dim, n_warmup=20, n_steps=5,
                    agent=AttrDict(policy_params=policy_params, target_divergence=2.0, batch_size=16))
    RLTrainer(conf).train()


if __name__ == "__main__":
    main()
