# expect: freed_graph
# source: https://github.com/hijkzzz/pymarl2/issues/46
"""Multi-agent PPO learner with a centralised critic, trained on synthetic episodes."""
import argparse
import copy
import time
from collections import defaultdict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Categorical


def default_args():
    return argparse.Namespace(
        n_agents=3,
        obs_dim=12,
        state_dim=20,
        n_actions=5,
        episode_limit=10,
        batch_size=8,
        hidden_dim=64,
        lr=5e-4,
        critic_lr=5e-4,
        gamma=0.99,
        td_lambda=0.8,
        eps_clip=0.2,
        entropy_coef=0.01,
        mini_epochs=4,
        grad_norm_clip=10.0,
        target_update_interval=200,
        t_max=4,
        log_interval=1,
        seed=0,
    )


class Logger:
    def __init__(self):
        self.stats = defaultdict(list)

    def log_stat(self, key, value, t):
        self.stats[key].append((t, float(value)))

    def print_recent(self):
        parts = []
        for k, v in sorted(self.stats.items()):
            if v:
                parts.append("%s=%.4f" % (k, v[-1][1]))
        print(" | ".join(parts))


class AgentPolicy(nn.Module):
    """Parameter-shared actor; agent id is appended to the observation."""

    def __init__(self, args):
        super().__init__()
        in_dim = args.obs_dim + args.n_agents
        self.fc1 = nn.Linear(in_dim, args.hidden_dim)
        self.fc2 = nn.Linear(args.hidden_dim, args.hidden_dim)
        self.head = nn.Linear(args.hidden_dim, args.n_actions)

    def forward(self, inputs, avail_actions):
        h = F.relu(self.fc1(inputs))
        h = F.relu(self.fc2(h))
        logits = self.head(h)
        logits = logits.masked_fill(avail_actions == 0, -1e10)
        return logits


class CentralCritic(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(args.state_dim + args.n_agents, args.hidden_dim),
            nn.ReLU(),
            nn.Linear(args.hidden_dim, args.hidden_dim),
            nn.ReLU(),
            nn.Linear(args.hidden_dim, 1),
        )

    def forward(self, state):
        return self.net(state).squeeze(-1)


class SyntheticRunner:
    """Produces episode batches with the shapes a SMAC runner would give."""

    def __init__(self, args, policy):
        self.args = args
        self.policy = policy
        self.agent_ids = torch.eye(args.n_agents)

    def _build_inputs(self, obs):
        b, t = obs.shape[:2]
        ids = self.agent_ids.expand(b, t, -1, -1)
        return torch.cat([obs, ids], dim=-1)

    def run(self):
        a = self.args
        B, T, N = a.batch_size, a.episode_limit, a.n_agents
        obs = torch.randn(B, T, N, a.obs_dim)
        state = torch.randn(B, T, a.state_dim)
        avail = torch.ones(B, T, N, a.n_actions)
        avail[..., -1] = (torch.rand(B, T, N) > 0.3).float()
        with torch.no_grad():
            logits = self.policy(self._build_inputs(obs), avail)
            dist = Categorical(logits=logits)
            actions = dist.sample()
            old_log_prob = dist.log_prob(actions)
        rewards = torch.randn(B, T) * 0.1 + (actions == 0).float().mean(-1)
        terminated = torch.zeros(B, T)
        terminated[:, -1] = 1.0
        mask = torch.ones(B, T)
        return dict(obs=obs, state=state, avail_actions=avail, actions=actions,
                    old_log_prob=old_log_prob, reward=rewards,
                    terminated=terminated, mask=mask)


class PPOLearner:
    def __init__(self, args, policy, logger):
        self.args = args
        self.policy = policy
        self.critic = CentralCritic(args)
        self.target_critic = copy.deepcopy(self.critic)
        self.logger = logger
        self.agent_ids = torch.eye(args.n_agents)
        self.actor_optimiser = torch.optim.Adam(self.policy.parameters(), lr=args.lr)
        self.critic_optimiser = torch.optim.Adam(self.critic.parameters(), lr=args.critic_lr)
        self.last_target_update = 0
        self.train_steps = 0

    def _critic_inputs(self, state):
        b, t = state.shape[:2]
        state = state.unsqueeze(2).expand(-1, -1, self.args.n_agents, -1)
        ids = self.agent_ids.expand(b, t, -1, -1)
        return torch.cat([state, ids], dim=-1)

    def _actor_inputs(self, obs):
        b, t = obs.shape[:2]
        ids = self.agent_ids.expand(b, t, -1, -1)
        return torch.cat([obs, ids], dim=-1)

    def _lambda_returns(self, rewards, terminated, mask, target_values):
        a = self.args
        B, T, N = target_values.shape
        ret = torch.zeros_like(target_values)
        ret[:, -1] = target_values[:, -1] * (1 - terminated[:, -1:])
        for t in range(T - 2, -1, -1):
            r = rewards[:, t:t + 1]
            cont = 1 - terminated[:, t:t + 1]
            ret[:, t] = a.td_lambda * a.gamma * ret[:, t + 1] + mask[:, t:t + 1] * (
                r + (1 - a.td_lambda) * a.gamma * target_values[:, t + 1] * cont)
        return ret

    def _advantages(self, batch):
        critic_in = self._critic_inputs(batch["state"])
        with torch.no_grad():
            target_vals = self.target_critic(critic_in)
        targets = self._lambda_returns(batch["reward"], batch["terminated"], batch["mask"], target_vals)
        values = self.critic(critic_in)
        advantages = targets - values
        std = advantages.std() + 1e-6
        advantages = (advantages - advantages.mean()) / std
        return advantages, targets

    def train(self, batch, t_env):
        a = self.args
        mask = batch["mask"].unsqueeze(-1).expand(-1, -1, a.n_agents)
        advantages, targets = self._advantages(batch)
        actor_in = self._actor_inputs(batch["obs"])
        critic_in = self._critic_inputs(batch["state"])

        for _ in range(a.mini_epochs):
            logits = self.policy(actor_in, batch["avail_actions"])
            dist = Categorical(logits=logits)
            log_prob = dist.log_prob(batch["actions"])
            ratios = torch.exp(log_prob - batch["old_log_prob"])
            surr1 = ratios * advantages
            surr2 = torch.clamp(ratios, 1 - a.eps_clip, 1 + a.eps_clip) * advantages
            entropy = dist.entropy()
            pg_loss = -((torch.min(surr1, surr2) + a.entropy_coef * entropy) * mask).sum() / mask.sum()

            self.actor_optimiser.zero_grad()
            pg_loss.backward()  # raises
            actor_grad_norm = nn.utils.clip_grad_norm_(self.policy.parameters(), a.grad_norm_clip)
            self.actor_optimiser.step()

            values = self.critic(critic_in)
            td_error = (values - targets) * mask
            critic_loss = (td_error ** 2).sum() / mask.sum()
            self.critic_optimiser.zero_grad()
            critic_loss.backward()
            critic_grad_norm = nn.utils.clip_grad_norm_(self.critic.parameters(), a.grad_norm_clip)
            self.critic_optimiser.step()

        self.train_steps += 1
        if self.train_steps - self.last_target_update >= a.target_update_interval:
            self.target_critic.load_state_dict(self.critic.state_dict())
            self.last_target_update = self.train_steps

        if t_env % a.log_interval == 0:
            self.logger.log_stat("pg_loss", pg_loss.item(), t_env)
            self.logger.log_stat("critic_loss", critic_loss.item(), t_env)
            self.logger.log_stat("actor_grad_norm", actor_grad_norm.item(), t_env)
            self.logger.log_stat("critic_grad_norm", critic_grad_norm.item(), t_env)
            self.logger.log_stat("advantage_abs", advantages.abs().mean().item(), t_env)


def main():
    args = default_args()
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    logger = Logger()
    policy = AgentPolicy(args)
    runner = SyntheticRunner(args, policy)
    learner = PPOLearner(args, policy, logger)
    start = time.time()
    for t_env in range(args.t_max):
        batch = runner.run()
        learner.train(batch, t_env)
        logger.print_recent()
    print("finished %d iterations in %.2fs" % (args.t_max, time.time() - start))


if __name__ == "__main__":
    main()
