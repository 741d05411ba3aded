# expect: inplace_version
# source: https://github.com/toshikwa/soft-actor-critic.pytorch/issues/1
"""Soft Actor-Critic with twinned Q-networks and automatic entropy tuning."""
from collections import deque

import numpy as np
import torch
import torch.nn as nn
from torch.distributions import Normal
from torch.optim import Adam


# ---- utils ----
def update_params(optim, network, loss, grad_clip=None, retain_graph=False):
    optim.zero_grad()
    loss.backward(retain_graph=retain_graph)  # raises
    if grad_clip is not None:
        for p in network.modules():
            torch.nn.utils.clip_grad_norm_(p.parameters(), grad_clip)
    optim.step()


def soft_update(target, source, tau):
    for t, s in zip(target.parameters(), source.parameters()):
        t.data.copy_(t.data * (1.0 - tau) + s.data * tau)


def hard_update(target, source):
    target.load_state_dict(source.state_dict())


def grad_false(network):
    for param in network.parameters():
        param.requires_grad = False

class RunningMeanStats:
    def __init__(self, n=10):
        self.n = n
        self.stats = deque(maxlen=n)

    def append(self, x):
        self.stats.append(x)

    def get(self):
        return np.mean(self.stats)

class ScalarLog:
    """In-memory stand-in for a SummaryWriter."""
    def __init__(self):
        self.scalars = {}

    def add_scalar(self, tag, value, step):
        self.scalars.setdefault(tag, []).append((step, float(value)))


# ---- model ----
def create_linear_network(input_dim, output_dim, hidden_units=(64, 64)):
    layers = []
    units = input_dim
    for next_units in hidden_units:
        layers += [nn.Linear(units, next_units), nn.ReLU()]
        units = next_units
    layers.append(nn.Linear(units, output_dim))
    net = nn.Sequential(*layers)
    for m in net.modules():
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            nn.init.constant_(m.bias, 0.0)
    return net


class QNetwork(nn.Module):
    def __init__(self, num_inputs, num_actions, hidden_units=(64, 64)):
        super().__init__()
        self.Q = create_linear_network(num_inputs + num_actions, 1, hidden_units)

    def forward(self, x):
        return self.Q(x)


class TwinnedQNetwork(nn.Module):
    def __init__(self, num_inputs, num_actions, hidden_units=(64, 64)):
        super().__init__()
        self.Q1 = QNetwork(num_inputs, num_actions, hidden_units)
        self.Q2 = QNetwork(num_inputs, num_actions, hidden_units)

    def forward(self, states, actions):
        x = torch.cat([states, actions], dim=1)
        return self.Q1(x), self.Q2(x)


class GaussianPolicy(nn.Module):
    LOG_STD_MAX = 2
    LOG_STD_MIN = -20
    eps = 1e-6

    def __init__(self, num_inputs, num_actions, hidden_units=(64, 64)):
        super().__init__()
        self.policy = create_linear_network(num_inputs, num_actions * 2, hidden_units)

    def forward(self, states):
        mean, log_std = torch.chunk(self.policy(states), 2, dim=-1)
        log_std = torch.clamp(log_std, min=self.LOG_STD_MIN, max=self.LOG_STD_MAX)
        return mean, log_std

    def sample(self, states):
        means, log_stds = self.forward(states)
        normals = Normal(means, log_stds.exp())
        xs = normals.rsample()
        actions = torch.tanh(xs)
        log_probs = normals.log_prob(xs) - torch.log(1 - actions.pow(2) + self.eps)
        entropies = -log_probs.sum(dim=1, keepdim=True)
        return actions, entropies, torch.tanh(means)


# ---- env + memory ----
class PointMassEnv:
    """Drive a 2-D point to the origin; reward is negative distance."""
    _max_episode_steps = 40
    def __init__(self, seed=0):
        self.rng = np.random.RandomState(seed)
        self.obs_dim, self.act_dim = 4, 2

    def reset(self):
        self.t = 0
        self.state = np.concatenate([self.rng.uniform(-1, 1, 2), np.zeros(2)])
        return self.state.astype(np.float32)

    def step(self, action):
        self.t += 1
        pos, vel = self.state[:2], self.state[2:]
        vel = 0.9 * vel + 0.1 * np.clip(action, -1, 1)
        pos = pos + 0.1 * vel
        self.state = np.concatenate([pos, vel])
        reward = -float(np.linalg.norm(pos))
        done = self.t >= self._max_episode_steps
        return self.state.astype(np.float32), reward, done, {}

    def sample_action(self):
        return self.rng.uniform(-1, 1, self.act_dim).astype(np.float32)


class ReplayMemory:
    def __init__(self, capacity, obs_dim, act_dim, seed=0):
        self.capacity = capacity
        self.rng = np.random.RandomState(seed)
        self.s = np.zeros((capacity, obs_dim), np.float32)
        self.a = np.zeros((capacity, act_dim), np.float32)
        self.r = np.zeros((capacity, 1), np.float32)
        self.s2 = np.zeros((capacity, obs_dim), np.float32)
        self.d = np.zeros((capacity, 1), np.float32)
        self._p, self._n = 0, 0

    def append(self, s, a, r, s2, d):
        self.s[self._p], self.a[self._p], self.r[self._p] = s, a, r
        self.s2[self._p], self.d[self._p] = s2, d
        self._p = (self._p + 1) % self.capacity
        self._n = min(self._n + 1, self.capacity)

    def sample(self, batch_size):
        idx = self.rng.randint(0, self._n, size=batch_size)
        return tuple(torch.from_numpy(x[idx]) for x in (self.s, self.a, self.r, self.s2, self.d))

    def __len__(self):
        return self._n


# ---- agent ----
class SacAgent:
    def __init__(self, env, num_steps=400, batch_size=32, lr=0.0003,
                 hidden_units=(64, 64), gamma=0.99, tau=0.005,
                 entropy_tuning=True, grad_clip=None, start_steps=60,
                 log_interval=10, seed=0):
        torch.manual_seed(seed)
        np.random.seed(seed)
        self.env = env
        obs_dim, act_dim = env.obs_dim, env.act_dim

        self.policy = GaussianPolicy(obs_dim, act_dim, hidden_units)
        self.critic = TwinnedQNetwork(obs_dim, act_dim, hidden_units)
        self.critic_target = TwinnedQNetwork(obs_dim, act_dim, hidden_units).eval()
        hard_update(self.critic_target, self.critic)
        grad_false(self.critic_target)

        self.policy_optim = Adam(self.policy.parameters(), lr=lr)
        self.q1_optim = Adam(self.critic.Q1.parameters(), lr=lr)
        self.q2_optim = Adam(self.critic.Q2.parameters(), lr=lr)

        self.entropy_tuning = entropy_tuning
        if entropy_tuning:
            self.target_entropy = -float(act_dim)
            self.log_alpha = torch.zeros(1, requires_grad=True)
            self.alpha = self.log_alpha.exp()
            self.alpha_optim = Adam([self.log_alpha], lr=lr)
        else:
            self.alpha = torch.tensor(0.2)

        self.memory = ReplayMemory(10000, obs_dim, act_dim, seed)
        self.writer = ScalarLog()
        self.train_rewards = RunningMeanStats(log_interval)
        self.steps, self.learning_steps, self.episodes = 0, 0, 0
        self.num_steps, self.batch_size, self.tau = num_steps, batch_size, tau
        self.gamma, self.grad_clip = gamma, grad_clip
        self.start_steps, self.log_interval = start_steps, log_interval

    def run(self):
        while self.steps < self.num_steps:
            self.train_episode()

    def is_update(self):
        return len(self.memory) > self.batch_size and self.steps >= self.start_steps

    def act(self, state):
        if self.start_steps > self.steps:
            return self.env.sample_action()
        state = torch.FloatTensor(state).unsqueeze(0)
        with torch.no_grad():
            action, _, _ = self.policy.sample(state)
        return action.numpy().reshape(-1)

    def train_episode(self):
        self.episodes += 1
        episode_reward, done = 0.0, False
        state = self.env.reset()
        while not done:
            action = self.act(state)
            next_state, reward, done, _ = self.env.step(action)
            self.steps += 1
            episode_reward += reward
            self.memory.append(state, action, reward, next_state, float(done))
            if self.is_update():
                self.learn()
            state = next_state
        self.train_rewards.append(episode_reward)

    def calc_current_q(self, states, actions, rewards, next_states, dones):
        return self.critic(states, actions)

    def calc_target_q(self, states, actions, rewards, next_states, dones):
        with torch.no_grad():
            next_actions, next_entropies, _ = self.policy.sample(next_states)
            next_q1, next_q2 = self.critic_target(next_states, next_actions)
            next_q = torch.min(next_q1, next_q2) + self.alpha * next_entropies
        return rewards + (1.0 - dones) * self.gamma * next_q

    def learn(self):
        self.learning_steps += 1
        soft_update(self.critic_target, self.critic, self.tau)
        batch = self.memory.sample(self.batch_size)
        weights = 1.

        q1_loss, q2_loss, mean_q1, mean_q2 = self.calc_critic_loss(batch, weights)
        policy_loss, entropies = self.calc_policy_loss(batch, weights)

        update_params(self.q1_optim, self.critic.Q1, q1_loss, self.grad_clip)
        update_params(self.q2_optim, self.critic.Q2, q2_loss, self.grad_clip)
        update_params(self.policy_optim, self.policy, policy_loss, self.grad_clip)

        if self.entropy_tuning:
            entropy_loss = self.calc_entropy_loss(entropies, weights)
            update_params(self.alpha_optim, None, entropy_loss)
            self.alpha = self.log_alpha.exp()

        if self.learning_steps % self.log_interval == 0:
            self.writer.add_scalar('loss/Q1', q1_loss.detach().item(), self.learning_steps)
            self.writer.add_scalar('loss/policy', policy_loss.detach().item(), self.learning_steps)

    def calc_critic_loss(self, batch, weights):
        curr_q1, curr_q2 = self.calc_current_q(*batch)
        target_q = self.calc_target_q(*batch)
        mean_q1 = curr_q1.detach().mean().item()
        mean_q2 = curr_q2.detach().mean().item()
        q1_loss = torch.mean((curr_q1 - target_q).pow(2) * weights)
        q2_loss = torch.mean((curr_q2 - target_q).pow(2) * weights)
        return q1_loss, q2_loss, mean_q1, mean_q2

    def calc_policy_loss(self, batch, weights):
        states, actions, rewards, next_states, dones = batch
        # We re-sample actions to calculate expectations of Q.
        sampled_action, entropy, _ = self.policy.sample(states)
        # expectations of Q with clipped double Q technique
        q1, q2 = self.critic(states, sampled_action)
        q = torch.min(q1, q2)
        policy_loss = torch.mean((- q - self.alpha * entropy) * weights)
        return policy_loss, entropy

    def calc_entropy_loss(self, entropy, weights):
        # Intuitively, we increse alpha when entropy is less than target
        # entropy, vice versa.
        return -torch.mean(self.log_alpha * (self.target_entropy - entropy).detach() * weights)


if __name__ == '__main__':
    env = PointMassEnv(seed=0)
    agent = SacAgent(env, num_steps=240, seed=0)
    agent.run()
    print('episodes', agent.episodes, 'mean reward', agent.train_rewards.get())
