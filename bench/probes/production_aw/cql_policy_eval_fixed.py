# expect: clean
# source: https://github.com/aviralkumar2907/CQL/issues/5
"""Conservative Q-Learning (CQL-SAC) trainer for offline RL on a synthetic D4RL-style dataset.

rlkit-style layout: a tanh-Gaussian policy, twin Q-functions with soft target copies,
an offline replay buffer, a CQLTrainer with automatic entropy tuning and an initial
behaviour-cloning phase (policy_eval_start), and a batch RL algorithm loop with
periodic evaluation statistics.
"""
import math
from collections import OrderedDict
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0


# ----------------------------------------------------------------------------- ptu helpers
def zeros(*sizes, requires_grad=False):
    return torch.zeros(*sizes, requires_grad=requires_grad)


def get_numpy(t):
    return t.detach().cpu().numpy()


def soft_update_from_to(source, target, tau):
    for target_param, param in zip(target.parameters(), source.parameters()):
        target_param.data.copy_(target_param.data * (1.0 - tau) + param.data * tau)


def create_stats_ordered_dict(name, data):
    data = np.asarray(data)
    return OrderedDict([(name + ' Mean', float(np.mean(data))), (name + ' Std', float(np.std(data)))])


# ----------------------------------------------------------------------------- networks
class Mlp(nn.Module):
    def __init__(self, hidden_sizes, output_size, input_size):
        super().__init__()
        self.fcs = nn.ModuleList()
        in_size = input_size
        for h in hidden_sizes:
            self.fcs.append(nn.Linear(in_size, h))
            in_size = h
        self.last_fc = nn.Linear(in_size, output_size)

    def forward(self, x):
        for fc in self.fcs:
            x = F.relu(fc(x))
        return self.last_fc(x)


class FlattenMlp(Mlp):
    """Q(s, a): concatenates its inputs along the last dim."""
    def forward(self, *inputs):
        return super().forward(torch.cat(inputs, dim=-1))


class TanhGaussianPolicy(Mlp):
    def __init__(self, hidden_sizes, obs_dim, action_dim):
        super().__init__(hidden_sizes, action_dim, obs_dim)
        self.last_fc_log_std = nn.Linear(hidden_sizes[-1], action_dim)

    def _dist_params(self, obs):
        h = obs
        for fc in self.fcs:
            h = F.relu(fc(h))
        mean = self.last_fc(h)
        log_std = torch.clamp(self.last_fc_log_std(h), LOG_STD_MIN, LOG_STD_MAX)
        return mean, log_std

    def forward(self, obs, reparameterize=True, return_log_prob=False):
        mean, log_std = self._dist_params(obs)
        std = log_std.exp()
        normal = torch.distributions.Normal(mean, std)
        pre_tanh = normal.rsample() if reparameterize else normal.sample()
        action = torch.tanh(pre_tanh)
        log_prob = None
        if return_log_prob:
            log_prob = normal.log_prob(pre_tanh) - torch.log(1 - action.pow(2) + 1e-6)
            log_prob = log_prob.sum(dim=1, keepdim=True)
        return action, mean, log_std, log_prob

    def log_prob(self, obs, actions):
        mean, log_std = self._dist_params(obs)
        actions = actions.clamp(-0.999, 0.999)
        pre_tanh = 0.5 * (torch.log1p(actions) - torch.log1p(-actions))
        normal = torch.distributions.Normal(mean, log_std.exp())
        lp = normal.log_prob(pre_tanh) - torch.log(1 - actions.pow(2) + 1e-6)
        return lp.sum(dim=1, keepdim=True)


# ----------------------------------------------------------------------------- data
class OfflineReplayBuffer:
    def __init__(self, obs_dim, act_dim, size, rng):
        self.obs = rng.standard_normal((size, obs_dim)).astype(np.float32)
        self.actions = np.tanh(rng.standard_normal((size, act_dim))).astype(np.float32)
        self.next_obs = (self.obs + 0.1 * rng.standard_normal((size, obs_dim))).astype(np.float32)
        self.rewards = (-np.square(self.actions).sum(1, keepdims=True)).astype(np.float32)
        self.terminals = (rng.random((size, 1)) < 0.05).astype(np.float32)
        self.size, self.rng = size, rng

    def random_batch(self, batch_size):
        idx = self.rng.integers(0, self.size, batch_size)
        return dict(observations=self.obs[idx], actions=self.actions[idx], rewards=self.rewards[idx],
                    next_observations=self.next_obs[idx], terminals=self.terminals[idx])


def np_to_pytorch_batch(np_batch):
    return {k: torch.from_numpy(v) for k, v in np_batch.items()}


# ----------------------------------------------------------------------------- trainer
class CQLTrainer:
    def __init__(self, action_dim, policy, qf1, qf2, target_qf1, target_qf2, cfg):
        self.policy, self.qf1, self.qf2 = policy, qf1, qf2
        self.target_qf1, self.target_qf2 = target_qf1, target_qf2
        self.soft_target_tau = cfg.soft_target_tau
        self.discount, self.reward_scale = cfg.discount, cfg.reward_scale
        self.use_automatic_entropy_tuning = cfg.use_automatic_entropy_tuning
        if self.use_automatic_entropy_tuning:
            self.target_entropy = -float(action_dim)
            self.log_alpha = zeros(1, requires_grad=True)
            self.alpha_optimizer = optim.Adam([self.log_alpha], lr=cfg.policy_lr)
        self.qf_criterion = nn.MSELoss()
        self.policy_optimizer = optim.Adam(self.policy.parameters(), lr=cfg.policy_lr)
        self.qf1_optimizer = optim.Adam(self.qf1.parameters(), lr=cfg.qf_lr)
        self.qf2_optimizer = optim.Adam(self.qf2.parameters(), lr=cfg.qf_lr)
        self.policy_eval_start = cfg.policy_eval_start
        self.num_random, self.temp, self.min_q_weight = cfg.num_random, cfg.temp, cfg.min_q_weight
        self.eval_statistics = OrderedDict()
        self._need_to_update_eval_statistics = True
        self._current_epoch = 0
        self._num_q_update_steps = 0
        self._num_policy_update_steps = 0

    def _get_tensor_values(self, obs, actions, network):
        num_repeat = actions.shape[0] // obs.shape[0]
        obs_temp = obs.unsqueeze(1).repeat(1, num_repeat, 1).view(obs.shape[0] * num_repeat, obs.shape[1])
        return network(obs_temp, actions).view(obs.shape[0], num_repeat, 1)

    def _get_policy_actions(self, obs, num_actions, network):
        obs_temp = obs.unsqueeze(1).repeat(1, num_actions, 1).view(obs.shape[0] * num_actions, obs.shape[1])
        new_actions, _, _, new_log_pi = network(obs_temp, reparameterize=True, return_log_prob=True)
        return new_actions.detach(), new_log_pi.view(obs.shape[0], num_actions, 1).detach()

    def train_from_torch(self, batch):
        self._current_epoch += 1
        rewards, terminals = batch['rewards'], batch['terminals']
        obs, actions, next_obs = batch['observations'], batch['actions'], batch['next_observations']

        # Policy and alpha loss
        new_obs_actions, policy_mean, policy_log_std, log_pi = self.policy(obs, reparameterize=True, return_log_prob=True)
        if self.use_automatic_entropy_tuning:
            alpha_loss = -(self.log_alpha * (log_pi + self.target_entropy).detach()).mean()
            self.alpha_optimizer.zero_grad()
            alpha_loss.backward()
            self.alpha_optimizer.step()
            alpha = self.log_alpha.exp()
        else:
            alpha_loss, alpha = 0, 1
        q_new_actions = torch.min(self.qf1(obs, new_obs_actions), self.qf2(obs, new_obs_actions))
        policy_loss = (alpha * log_pi - q_new_actions).mean()
        if self._current_epoch < self.policy_eval_start:
            # behavioural cloning for the first few gradient steps
            policy_log_prob = self.policy.log_prob(obs, actions)
            policy_loss = (alpha * log_pi - policy_log_prob).mean()

        # QF loss
        q1_pred, q2_pred = self.qf1(obs, actions), self.qf2(obs, actions)
        new_next_actions, _, _, new_log_pi = self.policy(next_obs, reparameterize=True, return_log_prob=True)
        target_q_values = torch.min(self.target_qf1(next_obs, new_next_actions),
                                    self.target_qf2(next_obs, new_next_actions))
        q_target = (self.reward_scale * rewards + (1. - terminals) * self.discount * target_q_values).detach()
        qf1_loss = self.qf_criterion(q1_pred, q_target)
        qf2_loss = self.qf_criterion(q2_pred, q_target)

        # CQL regulariser (importance-sampled, min_q_version 3)
        random_actions = torch.empty(q2_pred.shape[0] * self.num_random, actions.shape[-1]).uniform_(-1, 1)
        curr_actions, curr_log_pis = self._get_policy_actions(obs, self.num_random, self.policy)
        next_actions, next_log_pis = self._get_policy_actions(next_obs, self.num_random, self.policy)
        random_density = math.log(0.5 ** actions.shape[-1])
        cat_q1 = torch.cat([self._get_tensor_values(obs, random_actions, self.qf1) - random_density,
                            self._get_tensor_values(obs, next_actions, self.qf1) - next_log_pis,
                            self._get_tensor_values(obs, curr_actions, self.qf1) - curr_log_pis], 1)
        cat_q2 = torch.cat([self._get_tensor_values(obs, random_actions, self.qf2) - random_density,
                            self._get_tensor_values(obs, next_actions, self.qf2) - next_log_pis,
                            self._get_tensor_values(obs, curr_actions, self.qf2) - curr_log_pis], 1)
        min_qf1_loss = torch.logsumexp(cat_q1 / self.temp, dim=1).mean() * self.min_q_weight * self.temp
        min_qf2_loss = torch.logsumexp(cat_q2 / self.temp, dim=1).mean() * self.min_q_weight * self.temp
        min_qf1_loss = min_qf1_loss - q1_pred.mean() * self.min_q_weight
        min_qf2_loss = min_qf2_loss - q2_pred.mean() * self.min_q_weight
        qf1_loss = qf1_loss + min_qf1_loss
        qf2_loss = qf2_loss + min_qf2_loss

        # Update networks
        self._num_policy_update_steps += 1
        self.policy_optimizer.zero_grad()
        policy_loss.backward(retain_graph=False)
        self.policy_optimizer.step()

        self._num_q_update_steps += 1
        self.qf1_optimizer.zero_grad()
        qf1_loss.backward(retain_graph=True)
        self.qf1_optimizer.step()
        self.qf2_optimizer.zero_grad()
        qf2_loss.backward(retain_graph=True)
        self.qf2_optimizer.step()

        # Soft updates
        soft_update_from_to(self.qf1, self.target_qf1, self.soft_target_tau)
        soft_update_from_to(self.qf2, self.target_qf2, self.soft_target_tau)

        if self._need_to_update_eval_statistics:
            self._need_to_update_eval_statistics = False
            self.eval_statistics['QF1 Loss'] = float(np.mean(get_numpy(qf1_loss)))
            self.eval_statistics['QF2 Loss'] = float(np.mean(get_numpy(qf2_loss)))
            self.eval_statistics['Policy Loss'] = float(np.mean(get_numpy(policy_loss)))
            self.eval_statistics.update(create_stats_ordered_dict('Q1 Predictions', get_numpy(q1_pred)))
            self.eval_statistics.update(create_stats_ordered_dict('Log Pis', get_numpy(log_pi)))
            self.eval_statistics.update(create_stats_ordered_dict('Policy mu', get_numpy(policy_mean)))
            if self.use_automatic_entropy_tuning:
                self.eval_statistics['Alpha'] = alpha.item()
                self.eval_statistics['Alpha Loss'] = alpha_loss.item()

    def end_epoch(self, epoch):
        self._need_to_update_eval_statistics = True

    def get_diagnostics(self):
        return self.eval_statistics


# ----------------------------------------------------------------------------- algorithm
class BatchRLAlgorithm:
    def __init__(self, trainer, replay_buffer, cfg):
        self.trainer, self.replay_buffer, self.cfg = trainer, replay_buffer, cfg

    def train(self):
        for epoch in range(self.cfg.num_epochs):
            for _ in range(self.cfg.num_trains_per_train_loop):
                batch = np_to_pytorch_batch(self.replay_buffer.random_batch(self.cfg.batch_size))
                self.trainer.train_from_torch(batch)
            stats = self.trainer.get_diagnostics()
            print('epoch %d  policy loss %.4f  qf1 loss %.4f' % (epoch, stats['Policy Loss'], stats['QF1 Loss']))
            self.trainer.end_epoch(epoch)


def main():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    variant = SimpleNamespace(
        obs_dim=11, action_dim=3, hidden=(64, 64), buffer_size=2000, batch_size=64,
        num_epochs=3, num_trains_per_train_loop=4,
        trainer=SimpleNamespace(discount=0.99, reward_scale=1.0, policy_lr=3e-4, qf_lr=3e-4,
                                soft_target_tau=5e-3, use_automatic_entropy_tuning=True,
                                policy_eval_start=2, num_random=4, temp=1.0, min_q_weight=5.0),
    )
    qf1 = FlattenMlp(variant.hidden, 1, variant.obs_dim + variant.action_dim)
    qf2 = FlattenMlp(variant.hidden, 1, variant.obs_dim + variant.action_dim)
    target_qf1 = FlattenMlp(variant.hidden, 1, variant.obs_dim + variant.action_dim)
    target_qf2 = FlattenMlp(variant.hidden, 1, variant.obs_dim + variant.action_dim)
    target_qf1.load_state_dict(qf1.state_dict())
    target_qf2.load_state_dict(qf2.state_dict())
    policy = TanhGaussianPolicy(variant.hidden, variant.obs_dim, variant.action_dim)
    buffer = OfflineReplayBuffer(variant.obs_dim, variant.action_dim, variant.buffer_size, rng)
    trainer = CQLTrainer(variant.action_dim, policy, qf1, qf2, target_qf1, target_qf2, variant.trainer)
    BatchRLAlgorithm(trainer, buffer, variant).train()


if __name__ == '__main__':
    main()
