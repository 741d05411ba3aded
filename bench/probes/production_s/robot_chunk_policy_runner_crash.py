# expect: inference_tensor
# source: https://github.com/isaac-sim/IsaacLab-Arena/pull/96
"""Closed-loop evaluation of an action-chunking manipulation policy.

Modelled on the IsaacLab-Arena policy runner: a vectorised reach environment
(torch tensors, auto-reset of finished sub-environments), a policy registry,
and a GR00T-style closed-loop policy that predicts chunks of future actions
and replays them over several environment steps, keeping per-environment
chunk state.  The policy network is first behaviour-cloned from a scripted
expert (train_step), then the runner rolls it out under inference mode and
reports success metrics.
"""
import argparse
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

POLICY_REGISTRY = {}


def register_policy(name):
    def _wrap(cls):
        POLICY_REGISTRY[name] = cls
        return cls
    return _wrap


def get_policy_cls(name):
    return POLICY_REGISTRY[name]


@dataclass
class ReachEnvCfg:
    num_envs: int = 8
    max_episode_length: int = 12
    dt: float = 0.1
    success_radius: float = 0.05
    seed: int = 0


class ReachEnv:
    """Planar 2-link reach task with batched state and auto-reset."""

    def __init__(self, cfg: ReachEnvCfg):
        self.cfg, self.num_envs = cfg, cfg.num_envs
        self.gen = torch.Generator().manual_seed(cfg.seed)
        self.joint_pos = torch.zeros(self.num_envs, 2)
        self.target = torch.zeros(self.num_envs, 2)
        self.episode_length = torch.zeros(self.num_envs, dtype=torch.long)
        self.successes, self.episodes = 0, 0
        self.task_description = "reach the red target with the end effector"

    def forward_kinematics(self, q):
        l1, l2 = 0.5, 0.4
        x = l1 * torch.cos(q[:, 0]) + l2 * torch.cos(q[:, 0] + q[:, 1])
        y = l1 * torch.sin(q[:, 0]) + l2 * torch.sin(q[:, 0] + q[:, 1])
        return torch.stack([x, y], dim=-1)

    def _reset_idx(self, env_ids):
        self.joint_pos[env_ids] = (torch.rand(len(env_ids), 2, generator=self.gen) - 0.5) * 2.0
        angle = torch.rand(len(env_ids), generator=self.gen) * 3.1416
        self.target[env_ids] = 0.6 * torch.stack([torch.cos(angle), torch.sin(angle)], dim=-1)
        self.episode_length[env_ids] = 0

    def reset(self):
        self._reset_idx(torch.arange(self.num_envs))
        return self.observe(), {}

    def observe(self):
        ee = self.forward_kinematics(self.joint_pos)
        return {"policy": torch.cat([self.joint_pos, ee, self.target - ee], dim=-1)}

    def step(self, actions):
        self.joint_pos = self.joint_pos + self.cfg.dt * actions.clamp(-1.0, 1.0)
        self.episode_length = self.episode_length + 1
        dist = (self.forward_kinematics(self.joint_pos) - self.target).norm(dim=-1)
        terminated = dist < self.cfg.success_radius
        truncated = self.episode_length >= self.cfg.max_episode_length
        done = (terminated | truncated).nonzero().flatten()
        self.successes += int(terminated.sum())
        self.episodes += len(done)
        if len(done) > 0:
            self._reset_idx(done)
        return self.observe(), -dist, terminated, truncated, {}

    def expert_action(self, obs):
        q, err = obs[:, :2], obs[:, 4:6]
        l1, l2 = 0.5, 0.4
        j = torch.stack([
            torch.stack([-l1 * torch.sin(q[:, 0]) - l2 * torch.sin(q[:, 0] + q[:, 1]),
                         -l2 * torch.sin(q[:, 0] + q[:, 1])], dim=-1),
            torch.stack([l1 * torch.cos(q[:, 0]) + l2 * torch.cos(q[:, 0] + q[:, 1]),
                         l2 * torch.cos(q[:, 0] + q[:, 1])], dim=-1)], dim=1)
        return 4.0 * torch.bmm(j.transpose(1, 2), err.unsqueeze(-1)).squeeze(-1)


class ChunkedActionHead(nn.Module):
    def __init__(self, obs_dim=6, action_dim=2, chunk_length=4, hidden=64):
        super().__init__()
        self.chunk_length, self.action_dim = chunk_length, action_dim
        self.net = nn.Sequential(nn.Linear(obs_dim, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(),
                                 nn.Linear(hidden, chunk_length * action_dim))

    def forward(self, obs):
        return self.net(obs).view(-1, self.chunk_length, self.action_dim)


class PolicyBase:
    def set_task_description(self, text):
        self.task_description = text

    def is_recording(self):
        return False


@register_policy("closedloop_chunking")
class ClosedLoopChunkingPolicy(PolicyBase):
    def __init__(self, num_envs, chunk_length=4, lr=3e-3):
        self.model = ChunkedActionHead(chunk_length=chunk_length)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=lr)
        self.chunk_length = chunk_length
        self.current_action_chunk = torch.zeros(num_envs, chunk_length, 2)
        self.current_action_index = torch.zeros(num_envs, dtype=torch.long)
        self.env_requires_new_chunk = torch.ones(num_envs, dtype=torch.bool)

    @classmethod
    def from_args(cls, args):
        return cls(num_envs=args.num_envs, chunk_length=args.chunk_length, lr=args.lr)

    def train_step(self, obs, expert_chunk):
        self.model.train()
        loss = F.mse_loss(self.model(obs), expert_chunk)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def get_action(self, env, obs):
        self.model.eval()
        if self.env_requires_new_chunk.any():
            new_chunk = self.model(obs["policy"])
            mask = self.env_requires_new_chunk
            self.current_action_chunk = torch.where(mask[:, None, None], new_chunk, self.current_action_chunk)
            self.current_action_index = torch.where(mask, torch.zeros_like(self.current_action_index),
                                                    self.current_action_index)
        rows = torch.arange(self.current_action_chunk.shape[0])
        action = self.current_action_chunk[rows, self.current_action_index]
        self.current_action_index = self.current_action_index + 1
        self.env_requires_new_chunk = self.current_action_index >= self.chunk_length
        return action

    def reset(self, env_ids=None):
        env_ids = slice(None) if env_ids is None else env_ids
        self.current_action_index[env_ids] = 0  # raises
        self.env_requires_new_chunk[env_ids] = True


def collect_expert_chunks(env, steps, chunk_length):
    obs_list, chunk_list = [], []
    obs, _ = env.reset()
    for _ in range(steps):
        o = obs["policy"]
        q = o[:, :2].clone()
        chunk = []
        for _ in range(chunk_length):
            ee = env.forward_kinematics(q)
            a = env.expert_action(torch.cat([q, ee, o[:, 4:6] + o[:, 2:4] - ee], dim=-1)).clamp(-1, 1)
            chunk.append(a)
            q = q + env.cfg.dt * a
        obs_list.append(o)
        chunk_list.append(torch.stack(chunk, dim=1))
        obs, _, _, _, _ = env.step(chunk_list[-1][:, 0])
    return torch.cat(obs_list), torch.cat(chunk_list)


def compute_metrics(env):
    return {"num_episodes": env.episodes, "success_rate": env.successes / max(1, env.episodes)}


def main():
    args = argparse.Namespace(policy_type="closedloop_chunking", num_envs=8, chunk_length=4, lr=3e-3,
                              bc_steps=60, num_steps=30, seed=0)
    torch.manual_seed(args.seed)
    policy = get_policy_cls(args.policy_type).from_args(args)
    obs_bc, chunk_bc = collect_expert_chunks(ReachEnv(ReachEnvCfg(num_envs=args.num_envs, seed=1)), 24,
                                             args.chunk_length)
    for it in range(args.bc_steps):
        loss = policy.train_step(obs_bc, chunk_bc)
    print("behaviour cloning loss %.4f" % loss)

    env = ReachEnv(ReachEnvCfg(num_envs=args.num_envs, seed=args.seed))
    obs, _ = env.reset()
    policy.set_task_description(env.task_description)
    for _ in range(args.num_steps):
        with torch.inference_mode():
            actions = policy.get_action(env, obs)
            obs, _, terminated, truncated, _ = env.step(actions)

        if terminated.any() or truncated.any():
            # only reset policy for those envs that are terminated or truncated
            env_ids = (terminated | truncated).nonzero().flatten()
            policy.reset(env_ids=env_ids)
    print("Metrics:", compute_metrics(env))


if __name__ == "__main__":
    main()
