# expect: clean
# source: https://github.com/microsoft/oac-explore/issues/27
"""Optimistic Actor-Critic (OAC) on a continuous point-mass task.

rlkit-style layout: a variant dict configures a tanh-Gaussian policy, twin Q
functions with Polyak-averaged targets, a SAC trainer with automatic entropy
tuning, a path collector that shifts the exploration mean along the gradient
of an upper confidence bound on Q, and a batch RL algorithm loop.
"""
import copy
import math
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
from torch.distributions import Normal

variant = dict(
    seed=0,
    layer_size=64,
    replay_buffer_size=int(1e4),
    algorithm_kwargs=dict(num_epochs=3, num_eval_steps_per_epoch=40, num_trains_per_train_loop=20,
                          num_expl_steps_per_train_loop=40, min_num_steps_before_training=100,
                          max_path_length=20, batch_size=64),
    trainer_kwargs=dict(discount=0.99, soft_target_tau=5e-3, target_update_period=1, policy_lr=3e-4,
                        qf_lr=3e-4, reward_scale=1.0, use_automatic_entropy_tuning=True),
    optimistic_exp=dict(should_use=True, beta_UB=4.66, delta=23.53),
)


class PointMassEnv:
    obs_dim, act_dim = 4, 2

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.goal = np.array([1.0, -0.5])

    def reset(self):
        self.pos = self.rng.uniform(-1, 1, 2)
        self.vel = np.zeros(2)
        return np.concatenate([self.pos, self.vel])

    def step(self, action):
        self.vel = 0.9 * self.vel + 0.1 * np.clip(action, -1, 1)
        self.pos = self.pos + self.vel
        reward = -np.linalg.norm(self.pos - self.goal)
        return np.concatenate([self.pos, self.vel]), reward, False, {}


class FlattenMlp(nn.Module):
    def __init__(self, input_size, output_size, hidden_sizes):
        super().__init__()
        layers, d = [], input_size
        for h in hidden_sizes:
            layers += [nn.Linear(d, h), nn.ReLU()]
            d = h
        self.net = nn.Sequential(*layers)
        self.last_fc = nn.Linear(d, output_size)

    def forward(self, *inputs):
        return self.last_fc(self.net(torch.cat(inputs, dim=1)))


class TanhGaussianPolicy(FlattenMlp):
    LOG_SIG_MAX, LOG_SIG_MIN = 2, -20

    def __init__(self, obs_dim, action_dim, hidden_sizes):
        super().__init__(obs_dim, action_dim, hidden_sizes)
        self.last_fc_log_std = nn.Linear(hidden_sizes[-1], action_dim)

    def forward(self, obs, reparameterize=True, deterministic=False, return_log_prob=False):
        h = self.net(obs)
        mean = self.last_fc(h)
        log_std = torch.clamp(self.last_fc_log_std(h), self.LOG_SIG_MIN, self.LOG_SIG_MAX)
        std = torch.exp(log_std)
        log_prob, pre_tanh_value = None, None
        if deterministic:
            action = torch.tanh(mean)
        else:
            normal = Normal(mean, std)
            pre_tanh_value = normal.rsample() if reparameterize else normal.sample()
            action = torch.tanh(pre_tanh_value)
            if return_log_prob:
                log_prob = normal.log_prob(pre_tanh_value) - torch.log(1 - action * action + 1e-6)
                log_prob = log_prob.sum(dim=1, keepdim=True)
        return action, mean, log_std, log_prob, std, pre_tanh_value


def get_optimistic_exploration_action(ob_np, policy, qfs, hyper_params):
    beta_UB, delta = hyper_params["beta_UB"], hyper_params["delta"]
    ob = torch.as_tensor(ob_np, dtype=torch.float32).unsqueeze(0)
    _, pre_tanh_mu_T, _, _, std, _ = policy(ob)
    pre_tanh_mu_T = pre_tanh_mu_T.detach().requires_grad_(True)
    tanh_mu_T = torch.tanh(pre_tanh_mu_T)
    Q1, Q2 = (qf(ob, tanh_mu_T) for qf in qfs)
    mu_Q, sigma_Q = (Q1 + Q2) / 2.0, torch.abs(Q1 - Q2) / 2.0
    Q_UB = mu_Q + beta_UB * sigma_Q
    grad = torch.autograd.grad(Q_UB, pre_tanh_mu_T)[0]
    Sigma_T = torch.pow(std.detach(), 2)
    denom = torch.sqrt(torch.sum(grad * grad * Sigma_T)) + 1e-6
    mu_C = math.sqrt(2.0 * delta) * Sigma_T * grad / denom + pre_tanh_mu_T
    action = torch.tanh(Normal(mu_C, std.detach()).sample())
    return action.squeeze(0).numpy()


class EnvReplayBuffer:
    def __init__(self, size, obs_dim, act_dim):
        self._obs = np.zeros((size, obs_dim), np.float32)
        self._next_obs = np.zeros((size, obs_dim), np.float32)
        self._act = np.zeros((size, act_dim), np.float32)
        self._rew = np.zeros((size, 1), np.float32)
        self._term = np.zeros((size, 1), np.float32)
        self._max, self._top, self._size = size, 0, 0

    def add_sample(self, o, a, r, d, o2):
        i = self._top
        self._obs[i], self._act[i], self._rew[i], self._term[i], self._next_obs[i] = o, a, r, d, o2
        self._top = (self._top + 1) % self._max
        self._size = min(self._size + 1, self._max)

    def random_batch(self, batch_size):
        idx = np.random.randint(0, self._size, batch_size)
        return dict(observations=self._obs[idx], actions=self._act[idx], rewards=self._rew[idx],
                    terminals=self._term[idx], next_observations=self._next_obs[idx])


class MdpPathCollector:
    def __init__(self, env, policy, qfs=None, optimistic_exp_hp=None):
        self.env, self.policy, self.qfs, self.hp = env, policy, qfs, optimistic_exp_hp
        self._obs = env.reset()

    def _action(self, ob):
        if self.hp is not None and self.hp["should_use"]:
            return get_optimistic_exploration_action(ob, self.policy, self.qfs, self.hp)
        with torch.no_grad():
            a, *_ = self.policy(torch.as_tensor(ob, dtype=torch.float32)[None], deterministic=True)
        return a[0].numpy()

    def collect_new_steps(self, buffer, num_steps, max_path_length):
        returns, t = [], 0
        for _ in range(num_steps):
            a = self._action(self._obs)
            o2, r, d, _ = self.env.step(a)
            if buffer is not None:
                buffer.add_sample(self._obs, a, r, d, o2)
            returns.append(r)
            t += 1
            self._obs = self.env.reset() if (d or t % max_path_length == 0) else o2
        return float(np.mean(returns))


class SACTrainer:
    def __init__(self, policy, qf1, qf2, target_qf1, target_qf2, action_dim, discount, reward_scale,
                 policy_lr, qf_lr, soft_target_tau, target_update_period, use_automatic_entropy_tuning):
        self.policy, self.qf1, self.qf2 = policy, qf1, qf2
        self.target_qf1, self.target_qf2 = target_qf1, target_qf2
        self.discount, self.reward_scale = discount, reward_scale
        self.soft_target_tau, self.target_update_period = soft_target_tau, target_update_period
        self.use_automatic_entropy_tuning = use_automatic_entropy_tuning
        if use_automatic_entropy_tuning:
            self.target_entropy = -float(action_dim)
            self.log_alpha = torch.zeros(1, requires_grad=True)
            self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=policy_lr)
        self.qf_criterion = nn.MSELoss()
        self.policy_optimizer = torch.optim.Adam(policy.parameters(), lr=policy_lr)
        self.qf1_optimizer = torch.optim.Adam(qf1.parameters(), lr=qf_lr)
        self.qf2_optimizer = torch.optim.Adam(qf2.parameters(), lr=qf_lr)
        self.eval_statistics = OrderedDict()
        self._n_train_steps_total = 0

    @property
    def networks(self):
        return [self.policy, self.qf1, self.qf2, self.target_qf1, self.target_qf2]

    def train(self, np_batch):
        batch = {k: torch.as_tensor(v) for k, v in np_batch.items()}
        self.train_from_torch(batch)

    def _soft_update(self, source, target):
        for tp, p in zip(target.parameters(), source.parameters()):
            tp.data.copy_(tp.data * (1.0 - self.soft_target_tau) + p.data * self.soft_target_tau)

    def train_from_torch(self, batch):
        rewards, terminals = batch["rewards"], batch["terminals"]
        obs, actions, next_obs = batch["observations"], batch["actions"], batch["next_observations"]

        """Policy and Alpha Loss"""
        new_obs_actions, policy_mean, policy_log_std, log_pi, *_ = self.policy(obs, reparameterize=True,
                                                                               return_log_prob=True)
        if self.use_automatic_entropy_tuning:
            alpha_loss = -(self.log_alpha * (log_pi + self.target_entropy).detach()).mean()
            self.alpha_optimizer.zero_grad()
            alpha_loss.backward()
            self.alpha_optimizer.step()
            alpha = self.log_alpha.exp()
        else:
            alpha_loss, alpha = torch.zeros(()), 1

        """QF Loss"""
        q1_pred = self.qf1(obs, actions)
        q2_pred = self.qf2(obs, actions)
        new_next_actions, _, _, new_log_pi, *_ = self.policy(next_obs, reparameterize=True, return_log_prob=True)
        target_q_values = torch.min(self.target_qf1(next_obs, new_next_actions),
                                    self.target_qf2(next_obs, new_next_actions)) - alpha * new_log_pi
        q_target = self.reward_scale * rewards + (1.0 - terminals) * self.discount * target_q_values
        qf1_loss = self.qf_criterion(q1_pred, q_target.detach())
        qf2_loss = self.qf_criterion(q2_pred, q_target.detach())

        """Update networks"""
        self.qf1_optimizer.zero_grad()
        qf1_loss.backward()
        self.qf1_optimizer.step()
        self.qf2_optimizer.zero_grad()
        qf2_loss.backward()
        self.qf2_optimizer.step()
        q_new_actions = torch.min(self.qf1(obs, new_obs_actions), self.qf2(obs, new_obs_actions))
        policy_loss = (alpha * log_pi - q_new_actions).mean()
        self.policy_optimizer.zero_grad()
        policy_loss.backward()
        self.policy_optimizer.step()

        if self._n_train_steps_total % self.target_update_period == 0:
            self._soft_update(self.qf1, self.target_qf1)
            self._soft_update(self.qf2, self.target_qf2)
        self.eval_statistics.update(QF1_Loss=qf1_loss.item(), QF2_Loss=qf2_loss.item(),
                                    Policy_Loss=policy_loss.item(), Alpha_Loss=alpha_loss.item())
        self._n_train_steps_total += 1

    def get_diagnostics(self):
        return dict(self.eval_statistics)


class TorchBatchRLAlgorithm:
    def __init__(self, trainer, expl_collector, eval_collector, replay_buffer, num_epochs, batch_size,
                 max_path_length, num_eval_steps_per_epoch, num_expl_steps_per_train_loop,
                 num_trains_per_train_loop, min_num_steps_before_training):
        self.trainer, self.expl, self.eval, self.buffer = trainer, expl_collector, eval_collector, replay_buffer
        self.num_epochs, self.batch_size, self.max_path_length = num_epochs, batch_size, max_path_length
        self.num_eval_steps = num_eval_steps_per_epoch
        self.num_expl_steps = num_expl_steps_per_train_loop
        self.num_trains = num_trains_per_train_loop
        self.min_steps = min_num_steps_before_training

    def evaluate(self, epoch):
        ret = self.eval.collect_new_steps(None, self.num_eval_steps, self.max_path_length)
        print(f"epoch {epoch}  eval/avg_reward {ret:.3f}", self.trainer.get_diagnostics())

    def train(self):
        self.expl.collect_new_steps(self.buffer, self.min_steps, self.max_path_length)
        for epoch in range(self.num_epochs):
            self.expl.collect_new_steps(self.buffer, self.num_expl_steps, self.max_path_length)
            for net in self.trainer.networks:
                net.train(True)
            for _ in range(self.num_trains):
                self.trainer.train(self.buffer.random_batch(self.batch_size))
            self.evaluate(epoch)


def main():
    np.random.seed(variant["seed"])
    torch.manual_seed(variant["seed"])
    expl_env, eval_env = PointMassEnv(variant["seed"]), PointMassEnv(variant["seed"] + 1)
    obs_dim, action_dim, M = PointMassEnv.obs_dim, PointMassEnv.act_dim, variant["layer_size"]
    qf1 = FlattenMlp(obs_dim + action_dim, 1, [M, M])
    qf2 = FlattenMlp(obs_dim + action_dim, 1, [M, M])
    target_qf1, target_qf2 = copy.deepcopy(qf1), copy.deepcopy(qf2)
    policy = TanhGaussianPolicy(obs_dim, action_dim, [M, M])
    trainer = SACTrainer(policy, qf1, qf2, target_qf1, target_qf2, action_dim, **variant["trainer_kwargs"])
    expl_collector = MdpPathCollector(expl_env, policy, (qf1, qf2), variant["optimistic_exp"])
    eval_collector = MdpPathCollector(eval_env, policy)
    buffer = EnvReplayBuffer(variant["replay_buffer_size"], obs_dim, action_dim)
    algorithm = TorchBatchRLAlgorithm(trainer, expl_collector, eval_collector, buffer,
                                      **variant["algorithm_kwargs"])
    algorithm.train()


if __name__ == "__main__":
    main()
