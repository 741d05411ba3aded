# expect: clean
# source: https://github.com/mimoralea/gdrl/issues/13
"""Soft Actor-Critic agent in the style of the "Grokking Deep RL" chapter-12 code.

Pieces kept from the book's notebook: an FCQSA twin-critic network, an FCGP Gaussian
policy that owns its own log-alpha and alpha optimizer, a numpy ReplayBuffer, a SAC
agent with interaction_step / optimize_model / update_value_networks (Polyak
averaging), evaluate(), and a train loop over episodes with warm-up batches.
A tiny point-mass environment replaces gym so the script runs offline on CPU.
"""
import time
from itertools import count
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim


class PointMassEnv:
    """1-D point mass that must be pushed to the origin (Pendulum-like reward)."""
    def __init__(self, seed=0, max_steps=20):
        self.rng = np.random.default_rng(seed)
        self.max_steps = max_steps
        self.observation_dim, self.action_dim = 3, 1
        self.action_bounds = (np.array([-2.0]), np.array([2.0]))

    def reset(self):
        self.t = 0
        self.x, self.v = self.rng.uniform(-1, 1), 0.0
        return self._obs()

    def _obs(self):
        return np.array([self.x, self.v, self.t / self.max_steps], dtype=np.float32)

    def step(self, action):
        a = float(np.clip(action, -2, 2)[0])
        self.v = 0.9 * self.v + 0.1 * a
        self.x = self.x + 0.1 * self.v
        self.t += 1
        reward = -(self.x ** 2 + 0.1 * self.v ** 2 + 0.001 * a ** 2)
        return self._obs(), reward, self.t >= self.max_steps, {}


class FCQSA(nn.Module):
    def __init__(self, input_dim, output_dim, hidden_dims=(32, 32), activation_fc=F.relu):
        super(FCQSA, self).__init__()
        self.activation_fc = activation_fc
        self.input_layer = nn.Linear(input_dim + output_dim, hidden_dims[0])
        self.hidden_layers = nn.ModuleList()
        for i in range(len(hidden_dims) - 1):
            self.hidden_layers.append(nn.Linear(hidden_dims[i], hidden_dims[i + 1]))
        self.output_layer = nn.Linear(hidden_dims[-1], 1)

    def _format(self, state, action):
        x, u = state, action
        if not isinstance(x, torch.Tensor):
            x = torch.tensor(x, dtype=torch.float32).unsqueeze(0)
        if not isinstance(u, torch.Tensor):
            u = torch.tensor(u, dtype=torch.float32).unsqueeze(0)
        return x, u

    def forward(self, state, action):
        x, u = self._format(state, action)
        x = self.activation_fc(self.input_layer(torch.cat((x, u), dim=1)))
        for hidden_layer in self.hidden_layers:
            x = self.activation_fc(hidden_layer(x))
        return self.output_layer(x)


class FCGP(nn.Module):
    def __init__(self, input_dim, action_bounds, log_std_min=-20, log_std_max=2, hidden_dims=(32, 32),
                 activation_fc=F.relu, entropy_lr=0.001):
        super(FCGP, self).__init__()
        self.activation_fc = activation_fc
        self.env_min, self.env_max = action_bounds
        self.log_std_min, self.log_std_max = log_std_min, log_std_max
        self.input_layer = nn.Linear(input_dim, hidden_dims[0])
        self.hidden_layers = nn.ModuleList(
            [nn.Linear(hidden_dims[i], hidden_dims[i + 1]) for i in range(len(hidden_dims) - 1)])
        self.output_layer_mean = nn.Linear(hidden_dims[-1], len(self.env_max))
        self.output_layer_log_std = nn.Linear(hidden_dims[-1], len(self.env_max))
        self.env_min = torch.tensor(self.env_min, dtype=torch.float32)
        self.env_max = torch.tensor(self.env_max, dtype=torch.float32)
        self.nn_min = torch.tanh(torch.Tensor([float('-inf')]))
        self.nn_max = torch.tanh(torch.Tensor([float('inf')]))
        self.rescale_fn = lambda x: (x - self.nn_min) * (self.env_max - self.env_min) / \
            (self.nn_max - self.nn_min) + self.env_min
        self.target_entropy = -float(np.prod(self.env_max.shape))
        self.logalpha = torch.zeros(1, requires_grad=True)
        self.alpha_optimizer = optim.Adam([self.logalpha], lr=entropy_lr)

    def _format(self, state):
        x = state
        if not isinstance(x, torch.Tensor):
            x = torch.tensor(x, dtype=torch.float32).unsqueeze(0)
        return x

    def forward(self, state):
        x = self.activation_fc(self.input_layer(self._format(state)))
        for hidden_layer in self.hidden_layers:
            x = self.activation_fc(hidden_layer(x))
        x_mean = self.output_layer_mean(x)
        x_log_std = self.output_layer_log_std(x).clamp(self.log_std_min, self.log_std_max)
        return x_mean, x_log_std

    def full_pass(self, state, epsilon=1e-6):
        mean, log_std = self.forward(state)
        pi_s = torch.distributions.Normal(mean, log_std.exp())
        pre_tanh_action = pi_s.rsample()
        tanh_action = torch.tanh(pre_tanh_action)
        action = self.rescale_fn(tanh_action)
        log_prob = pi_s.log_prob(pre_tanh_action) - torch.log((1 - tanh_action.pow(2)).clamp(0, 1) + epsilon)
        log_prob = log_prob.sum(dim=1, keepdim=True)
        return action, log_prob, self.rescale_fn(torch.tanh(mean))

    def select_action(self, state):
        mean, log_std = self.forward(state)
        action = self.rescale_fn(torch.tanh(torch.distributions.Normal(mean, log_std.exp()).sample()))
        return action.detach().cpu().numpy().reshape(self.env_max.shape)

    def select_greedy_action(self, state):
        return self.rescale_fn(torch.tanh(self.forward(state)[0])).detach().cpu().numpy().reshape(self.env_max.shape)


class ReplayBuffer:
    def __init__(self, max_size=10000, batch_size=32, seed=0):
        self.ss_mem = np.empty(shape=(max_size), dtype=np.ndarray)
        self.as_mem = np.empty(shape=(max_size), dtype=np.ndarray)
        self.rs_mem = np.empty(shape=(max_size), dtype=np.ndarray)
        self.ps_mem = np.empty(shape=(max_size), dtype=np.ndarray)
        self.ds_mem = np.empty(shape=(max_size), dtype=np.ndarray)
        self.max_size, self.batch_size = max_size, batch_size
        self._idx, self.size = 0, 0
        self.rng = np.random.default_rng(seed)

    def store(self, sample):
        s, a, r, p, d = sample
        self.ss_mem[self._idx], self.as_mem[self._idx], self.rs_mem[self._idx] = s, a, r
        self.ps_mem[self._idx], self.ds_mem[self._idx] = p, d
        self._idx = (self._idx + 1) % self.max_size
        self.size = min(self.size + 1, self.max_size)

    def sample(self, batch_size=None):
        batch_size = batch_size or self.batch_size
        idxs = self.rng.choice(self.size, batch_size, replace=False)
        return (np.vstack(self.ss_mem[idxs]), np.vstack(self.as_mem[idxs]), np.vstack(self.rs_mem[idxs]),
                np.vstack(self.ps_mem[idxs]), np.vstack(self.ds_mem[idxs]))

    def __len__(self):
        return self.size


def load(experiences):
    return [torch.from_numpy(x).float() for x in experiences]


class SAC:
    def __init__(self, cfg):
        self.cfg = cfg
        self.gamma, self.tau = cfg.gamma, cfg.tau

    def optimize_model(self, experiences):
        states, actions, rewards, next_states, is_terminals = experiences

        # policy loss
        current_actions, logpi_s, _ = self.policy_model.full_pass(states)
        target_alpha = (logpi_s + self.policy_model.target_entropy).detach()
        alpha_loss = -(self.policy_model.logalpha * target_alpha).mean()
        self.policy_model.alpha_optimizer.zero_grad()
        alpha_loss.backward()
        self.policy_model.alpha_optimizer.step()
        alpha = self.policy_model.logalpha.exp()

        current_q_sa_a = self.online_value_model_a(states, current_actions)
        current_q_sa_b = self.online_value_model_b(states, current_actions)
        current_q_sa = torch.min(current_q_sa_a, current_q_sa_b)
        policy_loss = (alpha * logpi_s - current_q_sa).mean()

        self.policy_optimizer.zero_grad()
        policy_loss.backward()
        torch.nn.utils.clip_grad_norm_(self.policy_model.parameters(), self.cfg.policy_max_grad_norm)
        self.policy_optimizer.step()

        # Q loss
        ap, logpi_sp, _ = self.policy_model.full_pass(next_states)
        q_spap_a = self.target_value_model_a(next_states, ap)
        q_spap_b = self.target_value_model_b(next_states, ap)
        q_spap = torch.min(q_spap_a, q_spap_b) - alpha * logpi_sp
        target_q_sa = (rewards + self.gamma * q_spap * (1 - is_terminals)).detach()
        q_sa_a = self.online_value_model_a(states, actions)
        q_sa_b = self.online_value_model_b(states, actions)
        qa_loss = (q_sa_a - target_q_sa).pow(2).mul(0.5).mean()
        qb_loss = (q_sa_b - target_q_sa).pow(2).mul(0.5).mean()

        self.value_optimizer_a.zero_grad()
        qa_loss.backward()
        torch.nn.utils.clip_grad_norm_(self.online_value_model_a.parameters(), self.cfg.value_max_grad_norm)
        self.value_optimizer_a.step()

        self.value_optimizer_b.zero_grad()
        qb_loss.backward()
        torch.nn.utils.clip_grad_norm_(self.online_value_model_b.parameters(), self.cfg.value_max_grad_norm)
        self.value_optimizer_b.step()

    def interaction_step(self, state, env):
        min_samples = self.replay_buffer.batch_size * self.cfg.n_warmup_batches
        if len(self.replay_buffer) < min_samples:
            action = np.random.uniform(low=env.action_bounds[0], high=env.action_bounds[1])
        else:
            action = self.policy_model.select_action(state)
        new_state, reward, is_terminal, info = env.step(action)
        self.replay_buffer.store((state, action, reward, new_state, float(is_terminal)))
        self.episode_reward[-1] += reward
        self.episode_timestep[-1] += 1
        return new_state, is_terminal

    def update_value_networks(self, tau=None):
        tau = self.tau if tau is None else tau
        for target, online in ((self.target_value_model_a, self.online_value_model_a),
                               (self.target_value_model_b, self.online_value_model_b)):
            for target_param, online_param in zip(target.parameters(), online.parameters()):
                target_param.data.copy_((1.0 - tau) * target_param.data + tau * online_param.data)

    def evaluate(self, eval_policy_model, eval_env, n_episodes=1):
        rs = []
        for _ in range(n_episodes):
            s, d = eval_env.reset(), False
            rs.append(0)
            for _ in count():
                s, r, d, _ = eval_env.step(eval_policy_model.select_greedy_action(s))
                rs[-1] += r
                if d:
                    break
        return np.mean(rs), np.std(rs)

    def train(self, make_env_fn, seed, max_episodes):
        training_start = time.time()
        torch.manual_seed(seed)
        np.random.seed(seed)
        env, eval_env = make_env_fn(seed), make_env_fn(seed + 1)
        nS, nA = env.observation_dim, env.action_dim
        self.episode_timestep, self.episode_reward, self.evaluation_scores = [], [], []
        self.target_value_model_a = FCQSA(nS, nA)
        self.online_value_model_a = FCQSA(nS, nA)
        self.target_value_model_b = FCQSA(nS, nA)
        self.online_value_model_b = FCQSA(nS, nA)
        self.update_value_networks(tau=1.0)
        self.policy_model = FCGP(nS, env.action_bounds)
        self.value_optimizer_a = optim.Adam(self.online_value_model_a.parameters(), lr=self.cfg.value_lr)
        self.value_optimizer_b = optim.Adam(self.online_value_model_b.parameters(), lr=self.cfg.value_lr)
        self.policy_optimizer = optim.Adam(self.policy_model.parameters(), lr=self.cfg.policy_lr)
        self.replay_buffer = ReplayBuffer(max_size=self.cfg.buffer_size, batch_size=self.cfg.batch_size, seed=seed)

        for episode in range(1, max_episodes + 1):
            state, is_terminal = env.reset(), False
            self.episode_reward.append(0.0)
            self.episode_timestep.append(0.0)
            for step in count():
                state, is_terminal = self.interaction_step(state, env)
                min_samples = self.replay_buffer.batch_size * self.cfg.n_warmup_batches
                if len(self.replay_buffer) > min_samples:
                    experiences = load(self.replay_buffer.sample())
                    self.optimize_model(experiences)
                if np.sum(self.episode_timestep) % self.cfg.update_target_every_steps == 0:
                    self.update_value_networks()
                if is_terminal:
                    break
            score, _ = self.evaluate(self.policy_model, eval_env)
            self.evaluation_scores.append(score)
            print('episode %03d  train reward %.3f  eval score %.3f  elapsed %.1fs'
                  % (episode, self.episode_reward[-1], score, time.time() - training_start))
        return self.evaluation_scores


def main():
    cfg = SimpleNamespace(gamma=0.99, tau=0.005, value_lr=3e-4, policy_lr=3e-4, value_max_grad_norm=float('inf'),
                          policy_max_grad_norm=float('inf'), buffer_size=5000, batch_size=32, n_warmup_batches=2,
                          update_target_every_steps=1)
    agent = SAC(cfg)
    agent.train(lambda seed: PointMassEnv(seed=seed), seed=12, max_episodes=6)


if __name__ == '__main__':
    main()
