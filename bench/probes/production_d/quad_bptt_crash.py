# expect: inplace_version
# source: https://github.com/SJTU-ViSYS-team/VisFly/pull/35
"""Differentiable point-mass quadrotor environment trained with BPTT.

The simulator keeps its state as tensors on a Dynamics object; the integrator
advances them with an explicit Euler step and the reward is computed from the
state properties, so the whole rollout is differentiable w.r.t. the policy.
"""
import math
import time

import torch
import torch.nn as nn

CONFIG = {
    "env": {"num_envs": 8, "dt": 0.05, "horizon": 20, "mass": 1.0, "gravity": 9.81},
    "dynamics": {"lin_drag": 0.1, "quad_drag": 0.05, "max_thrust": 20.0, "integrator": "euler"},
    "reward": {"pos_w": 1.0, "vel_w": 0.1, "act_w": 0.01},
    "train": {"lr": 3e-3, "iterations": 3, "grad_clip": 10.0, "seed": 1},
}


class Integrator:
    """Explicit integrators operating on (position, velocity) pairs."""

    @staticmethod
    def integrate(pos, vel, acc, dt, method="euler"):
        if method == "euler":
            d_pos = vel
            d_vel = acc
            pos += d_pos * dt
            vel += d_vel * dt
            return pos, vel
        if method == "semi_implicit":
            vel += acc * dt
            pos += vel * dt
            return pos, vel
        raise ValueError(f"unknown integrator {method!r}")


class Dynamics:
    def __init__(self, num_envs, cfg_env, cfg_dyn):
        self.num_envs = num_envs
        self.mass = cfg_env["mass"]
        self.gravity = torch.tensor([0.0, 0.0, -cfg_env["gravity"]])
        self.dt = cfg_env["dt"]
        self.lin_drag = cfg_dyn["lin_drag"]
        self.quad_drag = cfg_dyn["quad_drag"]
        self.max_thrust = cfg_dyn["max_thrust"]
        self.method = cfg_dyn["integrator"]
        self._position = torch.zeros(num_envs, 3)
        self._velocity = torch.zeros(num_envs, 3)
        self._t = torch.zeros(num_envs)

    @property
    def position(self):
        return self._position

    @property
    def velocity(self):
        return self._velocity

    def reset(self, generator=None):
        self._position = torch.randn(self.num_envs, 3, generator=generator)
        self._velocity = torch.zeros(self.num_envs, 3)
        self._t = torch.zeros(self.num_envs)

    def drag(self):
        v = self._velocity
        speed = v.norm(dim=1, keepdim=True)
        return -self.lin_drag * v - self.quad_drag * v * speed

    def step(self, action):
        thrust = self.max_thrust * torch.sigmoid(action)
        force = thrust + self.mass * self.gravity + self.drag()
        acc = force / self.mass
        self._position, self._velocity = Integrator.integrate(
            self._position, self._velocity, acc, self.dt, self.method)
        self._t = self._t + self.dt
        return acc


class HoverEnv:
    def __init__(self, cfg):
        self.cfg = cfg
        self.dynamics = Dynamics(cfg["env"]["num_envs"], cfg["env"], cfg["dynamics"])
        self.target = torch.tensor([0.0, 0.0, 1.0])
        self.gen = torch.Generator().manual_seed(cfg["train"]["seed"])

    def reset(self):
        self.dynamics.reset(self.gen)
        return self.get_obs()

    def get_obs(self):
        return torch.cat([self.dynamics.position - self.target, self.dynamics.velocity], dim=1)

    def get_reward(self, action):
        w = self.cfg["reward"]
        pos_err = (self.dynamics.position - self.target).norm(dim=1)
        vel_pen = self.dynamics.velocity.pow(2).sum(dim=1)
        return -(w["pos_w"] * pos_err + w["vel_w"] * vel_pen + w["act_w"] * action.pow(2).sum(dim=1))

    def step(self, action):
        self.dynamics.step(action)
        return self.get_obs(), self.get_reward(action)


class Policy(nn.Module):
    def __init__(self, obs_dim=6, act_dim=3, hidden=64):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.mu = nn.Linear(hidden, act_dim)
        nn.init.zeros_(self.mu.weight)
        # start close to hover thrust
        nn.init.constant_(self.mu.bias, math.log(9.81 / (20.0 - 9.81)))

    def forward(self, obs):
        return self.mu(self.body(obs))


class BPTTTrainer:
    def __init__(self, cfg):
        self.cfg = cfg
        self.env = HoverEnv(cfg)
        self.policy = Policy()
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=cfg["train"]["lr"])
        self.history = []

    def rollout(self):
        obs = self.env.reset()
        rewards = []
        for _ in range(self.cfg["env"]["horizon"]):
            action = self.policy(obs)
            obs, reward = self.env.step(action)
            rewards.append(reward)
        return torch.stack(rewards)

    def train_step(self):
        rewards = self.rollout()
        actor_loss = -rewards.sum(0).mean() / self.cfg["env"]["horizon"]
        self.optimizer.zero_grad()
        actor_loss.backward()  # raises
        nn.utils.clip_grad_norm_(self.policy.parameters(), self.cfg["train"]["grad_clip"])
        self.optimizer.step()
        return actor_loss.item()

    def learn(self):
        for it in range(self.cfg["train"]["iterations"]):
            t0 = time.time()
            loss = self.train_step()
            self.history.append(loss)
            print(f"iter {it:02d} actor_loss={loss:.4f} ({time.time() - t0:.2f}s)")


def main():
    torch.manual_seed(CONFIG["train"]["seed"])
    trainer = BPTTTrainer(CONFIG)
    trainer.learn()


if __name__ == "__main__":
    main()
