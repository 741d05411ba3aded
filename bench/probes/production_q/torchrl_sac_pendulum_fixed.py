# expect: clean
# source: https://github.com/pytorch/rl/issues/529
"""SAC on a pendulum swing-up task, laid out like the TorchRL SAC example.

Environment constructors compose transforms (dtype cast, reward scaling,
observation normalisation whose statistics come from a random rollout); an
EnvCreator produces the training environment, a separate recorder environment
is synchronised with it through state_dict, and a trainer with registered
hooks runs collection, SAC updates and periodic recording.
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_args(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--init_env_steps", type=int, default=200)
    parser.add_argument("--norm_stats", type=bool, default=True)
    parser.add_argument("--vecnorm", type=bool, default=False)
    parser.add_argument("--reward_scaling", type=float, default=0.1)
    parser.add_argument("--frames_per_batch", type=int, default=100)
    parser.add_argument("--total_frames", type=int, default=600)
    parser.add_argument("--max_frames_per_traj", type=int, default=100)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--optim_steps_per_batch", type=int, default=8)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--gamma", type=float, default=0.99)
    parser.add_argument("--record_interval", type=int, default=2)
    parser.add_argument("--seed", type=int, default=42)
    return parser.parse_args(argv)


class PendulumEnv:
    observation_key, action_dim = "observation", 1

    def __init__(self, seed=0):
        self.gen = torch.Generator().manual_seed(seed)
        self.state = None

    def _obs(self):
        th, thdot = self.state
        return torch.stack([torch.cos(th), torch.sin(th), thdot]).double()

    def reset(self):
        self.state = (torch.rand(2, generator=self.gen) * 2 - 1) * torch.tensor([math.pi, 1.0])
        return {self.observation_key: self._obs()}

    def rand_action(self):
        return torch.rand(1, generator=self.gen) * 4 - 2

    def step(self, action):
        th, thdot = self.state
        u = action.clamp(-2, 2)[0]
        cost = ((th + math.pi) % (2 * math.pi) - math.pi) ** 2 + 0.1 * thdot ** 2 + 0.001 * u ** 2
        thdot = (thdot + (3 * 10.0 / 2 * torch.sin(th) + 3.0 * u) * 0.05).clamp(-8, 8)
        self.state = torch.stack([th + thdot * 0.05, thdot])
        return {"next_observation": self._obs(), "reward": -cost.reshape(1).double(), "done": torch.zeros(1)}


class Transform(nn.Module):
    def forward(self, td):
        return td


class DoubleToFloat(Transform):
    def forward(self, td):
        return {k: v.float() if v.dtype == torch.float64 else v for k, v in td.items()}


class RewardScaling(Transform):
    def __init__(self, loc, scale):
        super().__init__()
        self.register_buffer("loc", torch.tensor(loc))
        self.register_buffer("scale", torch.tensor(scale))

    def forward(self, td):
        if "reward" in td:
            td["reward"] = (td["reward"] - self.loc) * self.scale
        return td


class ObservationNorm(Transform):
    def __init__(self, loc, scale, in_keys, standard_normal=True):
        super().__init__()
        loc = loc if isinstance(loc, torch.Tensor) else torch.tensor(loc, dtype=torch.float)
        scale = scale if isinstance(scale, torch.Tensor) else torch.tensor(scale, dtype=torch.float)
        self.register_buffer("loc", loc)
        self.register_buffer("scale", scale)
        self.in_keys, self.standard_normal = in_keys, standard_normal

    def forward(self, td):
        for key in self.in_keys:
            for k in (key, "next_" + key):
                if k in td:
                    td[k] = (td[k] - self.loc) / self.scale if self.standard_normal else td[k] * self.scale + self.loc
        return td


class Compose(Transform):
    def __init__(self, *transforms):
        super().__init__()
        self.transforms = nn.ModuleList(transforms)

    def forward(self, td):
        for t in self.transforms:
            td = t(td)
        return td


class TransformedEnv:
    def __init__(self, base_env, transform):
        self.base_env, self.transform = base_env, transform

    def reset(self):
        return self.transform(self.base_env.reset())

    def step(self, action):
        return self.transform(self.base_env.step(action))

    def rand_action(self):
        return self.base_env.rand_action()

    def rollout(self, max_steps, policy=None):
        td, steps = self.reset(), []
        for _ in range(max_steps):
            action = self.rand_action() if policy is None else policy(td["observation"])
            out = self.step(action)
            steps.append({"observation": td["observation"], "action": action, **out})
            td = {"observation": out["next_observation"]}
        return {k: torch.stack([s[k] for s in steps]) for k in steps[0]}

    def state_dict(self):
        return self.transform.state_dict()

    def load_state_dict(self, state_dict, **kwargs):
        self.transform.load_state_dict(state_dict, **kwargs)

    def close(self):
        self.base_env = None


class EnvCreator:
    def __init__(self, create_env_fn):
        self.create_env_fn = create_env_fn

    def __call__(self):
        return self.create_env_fn()


def transformed_env_constructor(args, stats=None, use_env_creator=True):
    def make_transformed_env():
        transforms = [DoubleToFloat(), RewardScaling(0.0, args.reward_scaling)]
        if stats is not None:
            transforms.append(ObservationNorm(**stats, in_keys=["observation"], standard_normal=True))
        return TransformedEnv(PendulumEnv(args.seed), Compose(*transforms))

    return EnvCreator(make_transformed_env) if use_env_creator else make_transformed_env


@torch.no_grad()
def get_stats_random_rollout(args, proof_environment, key=None):
    print("computing state stats")
    n, td_stats = 0, []
    while n < args.init_env_steps:
        _td_stats = proof_environment.rollout(max_steps=args.init_env_steps)
        n += _td_stats[key].shape[0]
        td_stats.append(_td_stats[key].cpu())
        del _td_stats
    td_stats = torch.cat(td_stats, 0)
    m, s = td_stats.mean(dim=0), td_stats.std(dim=0)
    m[s == 0] = 0.0
    s[s == 0] = 1.0
    print(f"stats computed for {td_stats.numel()} steps. Got: \nloc = {m}, \nscale = {s}")
    return {"loc": m, "scale": s}


class TanhActor(nn.Module):
    def __init__(self, obs_dim=3, act_dim=1, hidden=64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(obs_dim, hidden), nn.ReLU(), nn.Linear(hidden, 2 * act_dim))

    def forward(self, obs, deterministic=False):
        mu, log_std = self.net(obs).chunk(2, -1)
        dist = torch.distributions.Normal(mu, log_std.clamp(-5, 2).exp())
        raw = mu if deterministic else dist.rsample()
        action = torch.tanh(raw)
        log_prob = (dist.log_prob(raw) - torch.log(1 - action.pow(2) + 1e-6)).sum(-1, keepdim=True)
        return 2.0 * action, log_prob


class SACLoss(nn.Module):
    def __init__(self, actor, gamma):
        super().__init__()
        self.actor, self.gamma = actor, gamma
        self.qvalue = nn.ModuleList([nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 1)) for _ in range(2)])
        self.target_qvalue = nn.ModuleList([nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 1))
                                            for _ in range(2)])
        self.target_qvalue.load_state_dict(self.qvalue.state_dict())
        self.log_alpha = nn.Parameter(torch.zeros(()))

    def q(self, nets, obs, act):
        return torch.min(*[net(torch.cat([obs, act], -1)) for net in nets])

    def forward(self, batch):
        obs, act, rew, nobs = batch["observation"], batch["action"], batch["reward"], batch["next_observation"]
        alpha = self.log_alpha.exp()
        with torch.no_grad():
            nact, nlogp = self.actor(nobs)
            target = rew + self.gamma * (self.q(self.target_qvalue, nobs, nact) - alpha * nlogp)
        loss_qvalue = sum(F.mse_loss(net(torch.cat([obs, act], -1)), target) for net in self.qvalue)
        new_act, logp = self.actor(obs)
        loss_actor = (alpha.detach() * logp - self.q(self.qvalue, obs, new_act)).mean()
        loss_alpha = -(self.log_alpha * (logp.detach() - 1.0)).mean()
        return {"loss_actor": loss_actor, "loss_qvalue": loss_qvalue, "loss_alpha": loss_alpha}


class Recorder:
    def __init__(self, env, actor, record_interval):
        self.env, self.actor, self.record_interval, self._count = env, actor, record_interval, 0

    @torch.no_grad()
    def __call__(self, trainer):
        self._count += 1
        if self._count % self.record_interval == 0:
            td = self.env.rollout(100, policy=lambda o: self.actor(o, deterministic=True)[0])
            trainer.log("r_evaluation", td["reward"].mean().item())


class Trainer:
    def __init__(self, env_creator, loss_module, args):
        self.env, self.loss_module, self.args = env_creator(), loss_module, args
        self.optimizer = torch.optim.Adam(loss_module.parameters(), lr=args.lr)
        self.buffer, self._hooks, self.logs, self.collected = [], {"post_steps_log": []}, {}, 0

    def register_op(self, dest, op):
        self._hooks[dest].append(op)

    def log(self, key, value):
        self.logs[key] = value

    def train_step(self):
        idx = torch.randint(len(self.buffer[0]["reward"]), (self.args.batch_size,))
        batch = {k: v[idx] for k, v in self.buffer[0].items()}
        losses = self.loss_module(batch)
        self.optimizer.zero_grad()
        sum(losses.values()).backward()
        self.optimizer.step()
        with torch.no_grad():
            for p, tp in zip(self.loss_module.qvalue.parameters(), self.loss_module.target_qvalue.parameters()):
                tp.lerp_(p, 0.005)
        return {k: v.item() for k, v in losses.items()}

    def evaluate(self):
        for op in self._hooks["post_steps_log"]:
            op(self)
        return dict(self.logs)

    def train(self):
        actor = self.loss_module.actor
        while self.collected < self.args.total_frames:
            with torch.no_grad():
                td = self.env.rollout(self.args.frames_per_batch, policy=lambda o: actor(o)[0])
            self.collected += self.args.frames_per_batch
            self.buffer = [td] if not self.buffer else [{k: torch.cat([self.buffer[0][k], td[k]]) for k in td}]
            for _ in range(self.args.optim_steps_per_batch):
                self.logs.update(self.train_step())
            print(self.collected, {k: round(v, 3) for k, v in self.evaluate().items()})


def main():
    args = make_args([])
    torch.manual_seed(args.seed)
    stats = None
    if not args.vecnorm and args.norm_stats:
        proof_env = transformed_env_constructor(args=args, use_env_creator=False)()
        stats = get_stats_random_rollout(args, proof_env, key="next_observation")
        # make sure proof_env is closed
        proof_env.close()
    create_env_fn = transformed_env_constructor(args=args, stats=stats)
    recorder = transformed_env_constructor(args, stats=stats, use_env_creator=False)()
    recorder_rm = recorder
    recorder_rm.load_state_dict(create_env_fn().state_dict())
    loss_module = SACLoss(TanhActor(), args.gamma)
    trainer = Trainer(create_env_fn, loss_module, args)
    trainer.register_op("post_steps_log", Recorder(recorder, loss_module.actor, args.record_interval))
    trainer.train()


if __name__ == "__main__":
    main()
