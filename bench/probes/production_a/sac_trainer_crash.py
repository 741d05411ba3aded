# expect: inplace_version
# source: https://github.com/rail-berkeley/rlkit/pull/109
"""Soft actor-critic trainer (twin Q, automatic entropy tuning) on a synthetic replay buffer."""
import math
import time
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class SACConfig:
    obs_dim: int = 11
    action_dim: int = 3
    hidden_sizes: tuple = (64, 64)
    discount: float = 0.99
    reward_scale: float = 1.0
    policy_lr: float = 3e-4
    qf_lr: float = 3e-4
    soft_target_tau: float = 5e-3
    target_update_period: int = 1
    use_automatic_entropy_tuning: bool = True
    batch_size: int = 32
    buffer_size: int = 1000
    num_train_steps: int = 6
    seed: int = 0


def fanin_init(tensor):
    bound = 1.0 / math.sqrt(tensor.size(1))
    return tensor.uniform_(-bound, bound)


class Mlp(nn.Module):
    def __init__(self, input_size, output_size, hidden_sizes, init_w=3e-3):
        super().__init__()
        self.fcs = nn.ModuleList()
        in_size = input_size
        for h in hidden_sizes:
            fc = nn.Linear(in_size, h)
            with torch.no_grad():
                fanin_init(fc.weight)
                fc.bias.fill_(0.1)
            self.fcs.append(fc)
            in_size = h
        self.last_fc = nn.Linear(in_size, output_size)
        with torch.no_grad():
            self.last_fc.weight.uniform_(-init_w, init_w)
            self.last_fc.bias.uniform_(-init_w, init_w)

    def forward(self, x):
        h = x
        for fc in self.fcs:
            h = F.relu(fc(h))
        return self.last_fc(h)


class ConcatMlp(Mlp):
    def forward(self, *inputs):
        return super().forward(torch.cat(inputs, dim=-1))


class TanhGaussianPolicy(Mlp):
    LOG_STD_MIN, LOG_STD_MAX = -20, 2

    def __init__(self, obs_dim, action_dim, hidden_sizes):
        super().__init__(obs_dim, action_dim, hidden_sizes)
        self.last_fc_log_std = nn.Linear(hidden_sizes[-1], action_dim)

    def forward(self, obs, deterministic=False):
        h = obs
        for fc in self.fcs:
            h = F.relu(fc(h))
        mean = self.last_fc(h)
        log_std = torch.clamp(self.last_fc_log_std(h), self.LOG_STD_MIN, self.LOG_STD_MAX)
        std = log_std.exp()
        if deterministic:
            pre_tanh = mean
        else:
            pre_tanh = mean + std * torch.randn_like(mean)
        action = torch.tanh(pre_tanh)
        normal_lp = -0.5 * (((pre_tanh - mean) / std) ** 2) - log_std - 0.5 * math.log(2 * math.pi)
        log_prob = normal_lp - torch.log(1 - action.pow(2) + 1e-6)
        return action, log_prob.sum(dim=-1, keepdim=True)


class ReplayBuffer:
    def __init__(self, cfg):
        n = cfg.buffer_size
        self.obs = np.random.randn(n, cfg.obs_dim).astype(np.float32)
        self.actions = np.random.uniform(-1, 1, (n, cfg.action_dim)).astype(np.float32)
        self.rewards = np.random.randn(n, 1).astype(np.float32)
        self.next_obs = (self.obs + 0.05 * np.random.randn(n, cfg.obs_dim)).astype(np.float32)
        self.terminals = (np.random.rand(n, 1) < 0.05).astype(np.float32)

    def random_batch(self, batch_size):
        idx = np.random.randint(0, len(self.obs), batch_size)
        return dict(
            observations=torch.from_numpy(self.obs[idx]),
            actions=torch.from_numpy(self.actions[idx]),
            rewards=torch.from_numpy(self.rewards[idx]),
            next_observations=torch.from_numpy(self.next_obs[idx]),
            terminals=torch.from_numpy(self.terminals[idx]),
        )


class SACTrainer:
    def __init__(self, cfg, policy, qf1, qf2, target_qf1, target_qf2):
        self.cfg = cfg
        self.policy = policy
        self.qf1, self.qf2 = qf1, qf2
        self.target_qf1, self.target_qf2 = target_qf1, target_qf2
        self.target_entropy = -float(cfg.action_dim)
        self.log_alpha = torch.zeros(1, requires_grad=True)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=cfg.policy_lr)
        self.policy_optimizer = torch.optim.Adam(self.policy.parameters(), lr=cfg.policy_lr)
        self.qf1_optimizer = torch.optim.Adam(self.qf1.parameters(), lr=cfg.qf_lr)
        self.qf2_optimizer = torch.optim.Adam(self.qf2.parameters(), lr=cfg.qf_lr)
        self.qf_criterion = nn.MSELoss()
        self._n_train_steps_total = 0
        self.eval_statistics = OrderedDict()

    def _soft_update(self, source, target):
        tau = self.cfg.soft_target_tau
        with torch.no_grad():
            for tp, sp in zip(target.parameters(), source.parameters()):
                tp.mul_(1.0 - tau).add_(sp, alpha=tau)

    def compute_losses(self, batch):
        cfg = self.cfg
        obs, actions = batch["observations"], batch["actions"]
        rewards, terminals = batch["rewards"], batch["terminals"]
        next_obs = batch["next_observations"]

        new_obs_actions, log_pi = self.policy(obs)
        if cfg.use_automatic_entropy_tuning:
            alpha_loss = -(self.log_alpha * (log_pi + self.target_entropy).detach()).mean()
            alpha = self.log_alpha.exp()
        else:
            alpha_loss = torch.zeros(())
            alpha = torch.ones(1)

        q_new_actions = torch.min(self.qf1(obs, new_obs_actions), self.qf2(obs, new_obs_actions))
        policy_loss = (alpha.detach() * log_pi - q_new_actions).mean()

        q1_pred = self.qf1(obs, actions)
        q2_pred = self.qf2(obs, actions)
        with torch.no_grad():
            new_next_actions, new_log_pi = self.policy(next_obs)
            target_q_values = torch.min(
                self.target_qf1(next_obs, new_next_actions),
                self.target_qf2(next_obs, new_next_actions),
            ) - alpha.detach() * new_log_pi
            q_target = cfg.reward_scale * rewards + (1.0 - terminals) * cfg.discount * target_q_values
        qf1_loss = self.qf_criterion(q1_pred, q_target)
        qf2_loss = self.qf_criterion(q2_pred, q_target)
        return dict(policy_loss=policy_loss, qf1_loss=qf1_loss, qf2_loss=qf2_loss,
                    alpha_loss=alpha_loss, alpha=alpha, log_pi=log_pi)

    def train_from_torch(self, batch):
        losses = self.compute_losses(batch)

        if self.cfg.use_automatic_entropy_tuning:
            self.alpha_optimizer.zero_grad()
            losses["alpha_loss"].backward()
            self.alpha_optimizer.step()

        self.qf1_optimizer.zero_grad()
        losses["qf1_loss"].backward()
        self.qf1_optimizer.step()

        self.qf2_optimizer.zero_grad()
        losses["qf2_loss"].backward()
        self.qf2_optimizer.step()

        self.policy_optimizer.zero_grad()
        losses["policy_loss"].backward()  # raises
        self.policy_optimizer.step()

        if self._n_train_steps_total % self.cfg.target_update_period == 0:
            self._soft_update(self.qf1, self.target_qf1)
            self._soft_update(self.qf2, self.target_qf2)

        self.eval_statistics["QF1 Loss"] = losses["qf1_loss"].item()
        self.eval_statistics["QF2 Loss"] = losses["qf2_loss"].item()
        self.eval_statistics["Policy Loss"] = losses["policy_loss"].item()
        self.eval_statistics["Alpha"] = losses["alpha"].item()
        self.eval_statistics["Log Pis"] = losses["log_pi"].mean().item()
        self._n_train_steps_total += 1


def build(cfg):
    policy = TanhGaussianPolicy(cfg.obs_dim, cfg.action_dim, cfg.hidden_sizes)
    qfs = [ConcatMlp(cfg.obs_dim + cfg.action_dim, 1, cfg.hidden_sizes) for _ in range(4)]
    qfs[2].load_state_dict(qfs[0].state_dict())
    qfs[3].load_state_dict(qfs[1].state_dict())
    return SACTrainer(cfg, policy, *qfs)


def main():
    cfg = SACConfig()
    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)
    buffer = ReplayBuffer(cfg)
    trainer = build(cfg)
    t0 = time.time()
    for step in range(cfg.num_train_steps):
        batch = buffer.random_batch(cfg.batch_size)
        trainer.train_from_torch(batch)
        stats = ", ".join("%s=%.3f" % kv for kv in trainer.eval_statistics.items())
        print("step %d: %s" % (step, stats))
    print("done in %.2fs" % (time.time() - t0))


if __name__ == "__main__":
    main()
