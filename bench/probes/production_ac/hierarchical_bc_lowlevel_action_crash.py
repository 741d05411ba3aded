# expect: numpy_requires_grad
# source: https://github.com/isaac-sim/IsaacLab/pull/5923
"""Behaviour cloning of a high-level navigation policy on top of a pre-trained
low-level locomotion controller.

The environment is a CPU point-robot simulator that consumes numpy joint
targets.  Like Isaac Lab's PreTrainedPolicyAction term, the high-level action
is a velocity command; the action term feeds command + proprioception to a
frozen pre-trained low-level policy and writes its output into a persistent
joint-target buffer that the simulator reads every physics step.  Expert
demonstrations come from a scripted planner; the high-level policy is trained
with MSE behaviour cloning and evaluated by rolling it out.
"""
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn


CFG = SimpleNamespace(
    env=SimpleNamespace(num_envs=8, dt=0.05, episode_len=20, decimation=2, seed=0),
    low_level=SimpleNamespace(obs_dim=6, cmd_dim=2, act_dim=4, hidden=32),
    high_level=SimpleNamespace(hidden=64, lr=3e-3, epochs=15, batch_size=32, weight_decay=1e-4),
    demos=SimpleNamespace(num_episodes=3),
)


class PointRobotSim:
    """Minimal numpy 'physics': 4 actuators map to a planar velocity."""

    def __init__(self, cfg, rng):
        self.cfg = cfg
        self.rng = rng
        self.mixing = rng.normal(size=(4, 2)).astype(np.float32) * 0.5
        self.reset()

    def reset(self):
        n = self.cfg.num_envs
        self.pos = self.rng.uniform(-1, 1, size=(n, 2)).astype(np.float32)
        self.vel = np.zeros((n, 2), dtype=np.float32)
        self.goal = self.rng.uniform(-1, 1, size=(n, 2)).astype(np.float32)

    def set_joint_targets(self, joint_targets):
        targets = np.asarray(joint_targets, dtype=np.float32)  # raises
        self.vel = 0.8 * self.vel + 0.2 * np.tanh(targets) @ self.mixing

    def simulate(self):
        self.pos = np.clip(self.pos + self.cfg.dt * self.vel, -2.0, 2.0)

    def proprio(self):
        return np.concatenate([self.pos, self.vel, self.goal - self.pos], axis=1)


class LowLevelPolicy(nn.Module):
    """Stand-in for the exported locomotion policy (loaded as a plain module)."""

    def __init__(self, cfg):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(cfg.obs_dim + cfg.cmd_dim, cfg.hidden), nn.ELU(),
                                 nn.Linear(cfg.hidden, cfg.act_dim))

    def forward(self, obs):
        return self.net(obs)


class PreTrainedPolicyAction:
    """Action term: high-level velocity command -> low-level joint targets."""

    def __init__(self, cfg, sim, low_level_policy):
        self.cfg = cfg
        self.sim = sim
        self.policy = low_level_policy
        self._raw_actions = torch.zeros(cfg.env.num_envs, cfg.low_level.cmd_dim)
        self.low_level_actions = torch.zeros(cfg.env.num_envs, cfg.low_level.act_dim)
        self._counter = 0

    @property
    def action_dim(self):
        return self.cfg.low_level.cmd_dim

    def process_actions(self, actions):
        self._raw_actions[:] = actions.clamp(-1.0, 1.0)

    def _low_level_obs(self):
        proprio = torch.from_numpy(self.sim.proprio()[:, :4])
        return torch.cat([proprio, self._raw_actions, torch.zeros(proprio.shape[0], 2)], dim=1)

    def apply_actions(self):
        if self._counter % self.cfg.env.decimation == 0:
            low_level_actions = self.policy(self._low_level_obs())
            self.low_level_actions.copy_(low_level_actions)
        self.sim.set_joint_targets(self.low_level_actions)
        self._counter += 1


class NavEnv:
    def __init__(self, cfg, low_level_policy):
        self.cfg = cfg
        self.sim = PointRobotSim(cfg.env, np.random.RandomState(cfg.env.seed))
        self.action_term = PreTrainedPolicyAction(cfg, self.sim, low_level_policy)
        self.t = 0

    def reset(self):
        self.sim.reset()
        self.t = 0
        return torch.from_numpy(self.sim.proprio())

    def step(self, actions):
        self.action_term.process_actions(actions)
        for _ in range(self.cfg.env.decimation):
            self.action_term.apply_actions()
            self.sim.simulate()
        self.t += 1
        obs = torch.from_numpy(self.sim.proprio())
        dist = np.linalg.norm(self.sim.goal - self.sim.pos, axis=1)
        done = self.t >= self.cfg.env.episode_len
        return obs, torch.from_numpy(-dist), done


def scripted_expert(obs):
    to_goal = obs[:, 4:6]
    return to_goal / (to_goal.norm(dim=1, keepdim=True) + 1e-6)


class HighLevelPolicy(nn.Module):
    def __init__(self, obs_dim, act_dim, hidden):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(obs_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.head = nn.Linear(hidden, act_dim)

    def forward(self, obs):
        return torch.tanh(self.head(self.body(obs)))


def collect_demos(env, episodes):
    obs_buf, act_buf = [], []
    for _ in range(episodes):
        obs, done = env.reset(), False
        while not done:
            act = scripted_expert(obs)
            obs_buf.append(obs)
            act_buf.append(act)
            obs, _, done = env.step(act)
    return torch.cat(obs_buf), torch.cat(act_buf)


class BCTrainer:
    def __init__(self, cfg, policy):
        self.cfg = cfg.high_level
        self.policy = policy
        self.optimizer = torch.optim.Adam(policy.parameters(), lr=self.cfg.lr, weight_decay=self.cfg.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, T_max=self.cfg.epochs)

    def train_step(self, obs, act):
        loss = nn.functional.mse_loss(self.policy(obs), act)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def fit(self, obs, act):
        n = obs.shape[0]
        for epoch in range(self.cfg.epochs):
            perm = torch.randperm(n)
            losses = [self.train_step(obs[idx], act[idx]) for idx in perm.split(self.cfg.batch_size)]
            self.scheduler.step()
            if epoch % 5 == 0:
                print("bc epoch %d  loss %.4f" % (epoch, float(np.mean(losses))))

    def evaluate(self, env):
        obs, done, ret = env.reset(), False, 0.0
        while not done:
            with torch.no_grad():
                act = self.policy(obs)
            obs, rew, done = env.step(act)
            ret += rew.mean().item()
        return ret


def main():
    torch.manual_seed(CFG.env.seed)
    low_level = LowLevelPolicy(CFG.low_level)  # pretend weights come from a checkpoint
    env = NavEnv(CFG, low_level)
    obs, act = collect_demos(env, CFG.demos.num_episodes)
    print("demo transitions", tuple(obs.shape))
    policy = HighLevelPolicy(obs.shape[1], CFG.low_level.cmd_dim, CFG.high_level.hidden)
    trainer = BCTrainer(CFG, policy)
    trainer.fit(obs, act)
    print("eval return %.3f" % trainer.evaluate(env))


if __name__ == "__main__":
    main()
