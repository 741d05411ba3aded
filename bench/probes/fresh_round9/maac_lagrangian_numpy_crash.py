# expect: numpy_requires_grad
# source: https://github.com/parnika31/MACAAC/issues/1
"""Multi-agent constrained actor-attention-critic (MAAC with Lagrangian penalty
critics) on a synthetic treasure-collection environment: replay buffer,
attention critics, penalty critics and slow-timescale Lagrange multipliers."""
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from numpy import asarray
from torch.optim import Adam

MSELoss = nn.MSELoss()


def soft_update(target, source, tau):
    for tp, sp in zip(target.parameters(), source.parameters()):
        tp.data.copy_(tp.data * (1.0 - tau) + sp.data * tau)


def hard_update(target, source):
    for tp, sp in zip(target.parameters(), source.parameters()):
        tp.data.copy_(sp.data)


class TreasureEnv:
    """Vectorised toy env: each step returns (reward, collector penalty, depositor penalty) per agent."""

    def __init__(self, n_threads, n_agents, obs_dim, n_actions, seed):
        self.rng = np.random.RandomState(seed)
        self.n_threads, self.n_agents = n_threads, n_agents
        self.obs_dim, self.n_actions = obs_dim, n_actions

    def reset(self):
        return self.rng.randn(self.n_threads, self.n_agents, self.obs_dim).astype(np.float32)

    def step(self, actions):
        obs = self.rng.randn(self.n_threads, self.n_agents, self.obs_dim).astype(np.float32)
        rews = self.rng.rand(self.n_threads, self.n_agents, 1, 3).astype(np.float32)
        dones = np.zeros((self.n_threads, self.n_agents), dtype=np.float32)
        return obs, rews, dones, {}


class ReplayBuffer:
    def __init__(self, max_steps, n_agents, obs_dim, ac_dim):
        self.max_steps, self.n_agents = max_steps, n_agents
        self.obs = np.zeros((max_steps, n_agents, obs_dim), np.float32)
        self.acs = np.zeros((max_steps, n_agents, ac_dim), np.float32)
        self.rews = np.zeros((max_steps, n_agents), np.float32)
        self.pen1 = np.zeros((max_steps, n_agents), np.float32)
        self.pen2 = np.zeros((max_steps, n_agents), np.float32)
        self.next_obs = np.zeros((max_steps, n_agents, obs_dim), np.float32)
        self.dones = np.zeros((max_steps, n_agents), np.float32)
        self.filled, self.idx = 0, 0

    def __len__(self):
        return self.filled

    def push(self, obs, acs, rews, pen1, pen2, next_obs, dones):
        for t in range(obs.shape[0]):
            i = self.idx
            self.obs[i], self.acs[i], self.rews[i] = obs[t], acs[t], rews[t]
            self.pen1[i], self.pen2[i] = pen1[t], pen2[t]
            self.next_obs[i], self.dones[i] = next_obs[t], dones[t]
            self.idx = (self.idx + 1) % self.max_steps
            self.filled = min(self.filled + 1, self.max_steps)

    def sample(self, n):
        inds = np.random.choice(self.filled, n, replace=False)
        per_agent = lambda arr: [torch.from_numpy(arr[inds, a]) for a in range(self.n_agents)]
        return (per_agent(self.obs), per_agent(self.acs), per_agent(self.rews), per_agent(self.pen1),
                per_agent(self.pen2), per_agent(self.next_obs), per_agent(self.dones))


class DiscretePolicy(nn.Module):
    def __init__(self, obs_dim, n_actions, hidden_dim):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(obs_dim, hidden_dim), nn.LeakyReLU(), nn.Linear(hidden_dim, n_actions))

    def forward(self, obs, return_log_pi=False):
        logits = self.net(obs)
        probs = F.softmax(logits, dim=1)
        act_idx = torch.multinomial(probs, 1)
        act = F.one_hot(act_idx.squeeze(1), probs.shape[1]).float()
        if return_log_pi:
            return act, F.log_softmax(logits, dim=1).gather(1, act_idx)
        return act


class AttentionCritic(nn.Module):
    def __init__(self, n_agents, obs_dim, ac_dim, hidden_dim=32, attend_heads=2):
        super().__init__()
        self.n_agents, self.heads = n_agents, attend_heads
        self.encoders = nn.ModuleList([nn.Linear(obs_dim + ac_dim, hidden_dim) for _ in range(n_agents)])
        self.key = nn.Linear(hidden_dim, hidden_dim, bias=False)
        self.query = nn.Linear(hidden_dim, hidden_dim, bias=False)
        self.value = nn.Linear(hidden_dim, hidden_dim)
        self.heads_out = nn.ModuleList([nn.Linear(2 * hidden_dim, 1) for _ in range(n_agents)])

    def forward(self, inps, regularize=False):
        sa = [F.leaky_relu(enc(torch.cat([o, a], dim=1))) for enc, (o, a) in zip(self.encoders, inps)]
        keys, values = [self.key(s) for s in sa], [F.leaky_relu(self.value(s)) for s in sa]
        rets = []
        for i in range(self.n_agents):
            q_i = self.query(sa[i])
            others = [j for j in range(self.n_agents) if j != i]
            logits = torch.stack([(q_i * keys[j]).sum(1) for j in others], dim=1) / np.sqrt(q_i.shape[1])
            w = F.softmax(logits, dim=1)
            other_vals = (w.unsqueeze(2) * torch.stack([values[j] for j in others], dim=1)).sum(1)
            q = self.heads_out[i](torch.cat([sa[i], other_vals], dim=1))
            regs = [1e-3 * (logits ** 2).mean()] if regularize else []
            rets.append((q, regs))
        return rets


class AttentionSAC:
    def __init__(self, n_agents, obs_dim, n_actions, cfg):
        self.nagents, self.gamma, self.tau, self.reward_scale = n_agents, cfg.gamma, cfg.tau, cfg.reward_scale
        self.policies = [DiscretePolicy(obs_dim, n_actions, cfg.pol_hidden_dim) for _ in range(n_agents)]
        self.target_policies = [DiscretePolicy(obs_dim, n_actions, cfg.pol_hidden_dim) for _ in range(n_agents)]
        for tp, p in zip(self.target_policies, self.policies):
            hard_update(tp, p)
        self.policy_optimizers = [Adam(p.parameters(), lr=cfg.pi_lr) for p in self.policies]
        self.critics, self.target_critics, self.critic_optimizers = {}, {}, {}
        for name in ("reward", "penalty1", "penalty2"):
            critic = AttentionCritic(n_agents, obs_dim, n_actions, cfg.critic_hidden_dim, cfg.attend_heads)
            target = AttentionCritic(n_agents, obs_dim, n_actions, cfg.critic_hidden_dim, cfg.attend_heads)
            hard_update(target, critic)
            self.critics[name], self.target_critics[name] = critic, target
            self.critic_optimizers[name] = Adam(critic.parameters(), lr=cfg.q_lr, weight_decay=1e-3)

    def step(self, observations):
        return [pi(obs) for pi, obs in zip(self.policies, observations)]

    def _critic_loss(self, name, sample, signal):
        obs, acs, rews, pen1, pen2, next_obs, dones = sample
        next_acs, next_log_pis = zip(*[pi(ob, return_log_pi=True) for pi, ob in zip(self.target_policies, next_obs)])
        next_qs = self.target_critics[name](list(zip(next_obs, next_acs)))
        critic_rets = self.critics[name](list(zip(obs, acs)), regularize=True)
        loss = 0
        for a_i, (nq, _), log_pi, (pq, regs) in zip(range(self.nagents), next_qs, next_log_pis, critic_rets):
            target_q = signal[a_i].view(-1, 1) + self.gamma * nq * (1 - dones[a_i].view(-1, 1))
            target_q -= log_pi / self.reward_scale
            loss += MSELoss(pq, target_q.detach())
            for reg in regs:
                loss += reg
        return loss, critic_rets

    def _apply(self, name, loss):
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.critics[name].parameters(), 10 * self.nagents)
        self.critic_optimizers[name].step()
        self.critic_optimizers[name].zero_grad()

    def update_critic(self, sample):
        loss, _ = self._critic_loss("reward", sample, sample[2])
        self._apply("reward", loss)

    def update_penalty_critic(self, sample):
        pen_q_loss, critic_rets = self._critic_loss("penalty1", sample, sample[3])
        self._apply("penalty1", pen_q_loss)
        penalty_helper = torch.from_numpy(asarray([ret[0].mean() for ret in critic_rets], dtype=float)).detach()  # raises
        pen2_q_loss, nw_critic_rets = self._critic_loss("penalty2", sample, sample[4])
        self._apply("penalty2", pen2_q_loss)
        penalty_helper_new = torch.from_numpy(asarray([ret[0].mean() for ret in nw_critic_rets], dtype=float)).detach()
        return penalty_helper, penalty_helper_new

    def update_policies(self, sample):
        obs = sample[0]
        samp = [pi(ob, return_log_pi=True) for pi, ob in zip(self.policies, obs)]
        critic_rets = self.critics["reward"](list(zip(obs, [s[0] for s in samp])))
        for a_i, (_, log_pi), (q, _) in zip(range(self.nagents), samp, critic_rets):
            pol_loss = -(log_pi * (q - log_pi / self.reward_scale).detach()).mean()
            pol_loss.backward()
            self.policy_optimizers[a_i].step()
            self.policy_optimizers[a_i].zero_grad()
        for c in self.critics.values():
            c.zero_grad()

    def update_all_targets(self):
        for name in self.critics:
            soft_update(self.target_critics[name], self.critics[name], self.tau)
        for tp, p in zip(self.target_policies, self.policies):
            soft_update(tp, p, self.tau)


def run(config):
    torch.manual_seed(config.seed)
    np.random.seed(config.seed)
    lb_t_1 = torch.from_numpy(np.random.rand(1)).float()
    lb_t_2 = torch.from_numpy(np.random.rand(1)).float()
    env = TreasureEnv(config.n_rollout_threads, config.n_agents, config.obs_dim, config.n_actions, config.seed)
    model = AttentionSAC(config.n_agents, config.obs_dim, config.n_actions, config)
    buffer = ReplayBuffer(config.buffer_length, config.n_agents, config.obs_dim, config.n_actions)
    t = 0
    for ep_i in range(0, config.n_episodes, config.n_rollout_threads):
        obs = env.reset()
        for et_i in range(config.episode_length):
            torch_obs = [torch.from_numpy(np.ascontiguousarray(obs[:, i])) for i in range(config.n_agents)]
            with torch.no_grad():
                agent_actions = [ac.numpy() for ac in model.step(torch_obs)]
            acs = np.stack(agent_actions, axis=1)
            next_obs, rewards, dones, _ = env.step(acs)
            rew, pen1, pen2 = rewards[..., 0, 0], rewards[..., 0, 1], rewards[..., 0, 2]
            lagrangian = rew + lb_t_1.item() * pen1 + lb_t_2.item() * pen2
            buffer.push(obs, acs, lagrangian, pen1, pen2, next_obs, dones)
            obs = next_obs
            t += config.n_rollout_threads
            if len(buffer) >= config.batch_size and (t % config.steps_per_update) < config.n_rollout_threads:
                lag_mul_ls = []
                for _ in range(config.num_updates):
                    sample = buffer.sample(config.batch_size)
                    model.update_critic(sample)
                    penalty1_q, penalty2_q = model.update_penalty_critic(sample)
                    model.update_policies(sample)
                    model.update_all_targets()
                    lag_mul_ls.append((torch.clamp(lb_t_1 + (penalty1_q.mean() - config.alpha_1).float() * config.b_t, min=0.0),
                                       torch.clamp(lb_t_2 + (penalty2_q.mean() - config.alpha_2).float() * config.b_t, min=0.0)))
                lb_t_1 = torch.stack([m[0] for m in lag_mul_ls]).mean(0)
                lb_t_2 = torch.stack([m[1] for m in lag_mul_ls]).mean(0)
        print(f"Episodes {ep_i + 1}-{ep_i + config.n_rollout_threads}: lambda1={lb_t_1.item():.4f} lambda2={lb_t_2.item():.4f}")


if __name__ == "__main__":
    run(SimpleNamespace(seed=0, n_rollout_threads=4, n_agents=3, obs_dim=6, n_actions=4, buffer_length=2000,
                        n_episodes=8, episode_length=10, steps_per_update=8, num_updates=2, batch_size=32,
                        pol_hidden_dim=32, critic_hidden_dim=32, attend_heads=2, pi_lr=1e-3, q_lr=1e-3,
                        tau=0.01, gamma=0.99, reward_scale=100.0, b_t=1e-5, alpha_1=12.0, alpha_2=0.2))
