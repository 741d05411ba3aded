# expect: freed_graph
# source: https://github.com/pytorch/rl/issues/1187
"""TD3 on a point-mass control task, with a torchrl-style functional TD3 loss
(functionalized actor and twin critics evaluated with vmap)."""
import copy
from types import SimpleNamespace

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap


class PointMassEnv:
    """x'' = u, reward = -(x^2 + 0.1 u^2). Observation is (x, v)."""

    def __init__(self, horizon=40, seed=0):
        self.horizon = horizon
        self.rng = np.random.RandomState(seed)
        self.state, self.t = None, 0

    def reset(self):
        self.state = self.rng.uniform(-1, 1, size=2).astype(np.float32)
        self.t = 0
        return self.state.copy()

    def step(self, action):
        u = float(np.clip(action[0], -1.0, 1.0))
        x, v = self.state
        v = v + 0.1 * u
        x = x + 0.1 * v
        self.state = np.array([x, v], dtype=np.float32)
        self.t += 1
        reward = -(x ** 2 + 0.1 * u ** 2)
        done = self.t >= self.horizon
        return self.state.copy(), np.float32(reward), done


class Actor(nn.Module):
    def __init__(self, obs_dim, act_dim, hidden=64, max_action=1.0):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(obs_dim, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, act_dim))
        self.max_action = max_action

    def forward(self, obs):
        return torch.tanh(self.net(obs)) * self.max_action


class QValue(nn.Module):
    def __init__(self, obs_dim, act_dim, hidden=64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(obs_dim + act_dim, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 1))

    def forward(self, obs, action):
        return self.net(torch.cat([obs, action], -1))


class ReplayBuffer:
    def __init__(self, capacity, obs_dim, act_dim):
        self.obs = torch.zeros(capacity, obs_dim)
        self.action = torch.zeros(capacity, act_dim)
        self.reward = torch.zeros(capacity)
        self.next_obs = torch.zeros(capacity, obs_dim)
        self.done = torch.zeros(capacity)
        self.capacity, self.ptr, self.size = capacity, 0, 0

    def extend(self, obs, action, reward, next_obs, done):
        i = self.ptr
        self.obs[i], self.action[i] = torch.as_tensor(obs), torch.as_tensor(action)
        self.reward[i], self.done[i] = float(reward), float(done)
        self.next_obs[i] = torch.as_tensor(next_obs)
        self.ptr = (self.ptr + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample(self, batch_size):
        idx = torch.randint(0, self.size, (batch_size,))
        return {"observation": self.obs[idx], "action": self.action[idx],
                "next": {"observation": self.next_obs[idx], "reward": self.reward[idx],
                         "done": self.done[idx]}}


class TD3Loss(nn.Module):
    def __init__(self, actor_network, qvalue_network, num_qvalue_nets=2, policy_noise=0.2,
                 noise_clip=0.5, max_action=1.0, gamma=0.99):
        super().__init__()
        self.actor_network = actor_network
        self.actor_network_params = nn.ParameterDict(
            {k.replace(".", "__"): p for k, p in actor_network.named_parameters()})
        self.target_actor_network = copy.deepcopy(actor_network).requires_grad_(False)

        self.qvalue_template = copy.deepcopy(qvalue_network).to("meta")
        qnets = [copy.deepcopy(qvalue_network) for _ in range(num_qvalue_nets)]
        for q in qnets[1:]:
            for p in q.parameters():
                nn.init.normal_(p, std=0.1)
        params, _ = stack_module_state(qnets)
        self.qvalue_network_params = nn.ParameterDict(
            {k.replace(".", "__"): nn.Parameter(v) for k, v in params.items()})
        for k, v in params.items():
            self.register_buffer("target_q__" + k.replace(".", "__"), v.detach().clone())

        self.num_qvalue_nets = num_qvalue_nets
        self.policy_noise, self.noise_clip = policy_noise, noise_clip
        self.max_action, self.gamma = max_action, gamma

    # -- functional helpers -------------------------------------------------
    def _q_params(self):
        return {k.replace("__", "."): v for k, v in self.qvalue_network_params.items()}

    def _target_q_params(self):
        return {k[len("target_q__"):].replace("__", "."): v
                for k, v in self._buffers.items() if k.startswith("target_q__")}

    def _actor_params(self):
        return {k.replace("__", "."): v for k, v in self.actor_network_params.items()}

    def _call_qvalue(self, params, obs, action):
        return functional_call(self.qvalue_template, params, (obs, action))

    def _call_actor(self, params, obs):
        return functional_call(self.actor_network, params, (obs,))

    def qvalue_parameters(self):
        return self.qvalue_network_params.values()

    @torch.no_grad()
    def update_targets(self, tau=0.005):
        for tp, p in zip(self.target_actor_network.parameters(), self.actor_network.parameters()):
            tp.lerp_(p, tau)
        live = self._q_params()
        for k, buf in self._target_q_params().items():
            buf.lerp_(live[k], tau)

    def forward(self, tensordict):
        obs = tensordict["observation"]
        next_obs = tensordict["next"]["observation"]

        actor_params = {k: torch.stack([v, dict(self.target_actor_network.named_parameters())[k]], 0)
                        for k, v in self._actor_params().items()}
        obs_actor = torch.stack([obs, next_obs], 0)
        actor_out = vmap(self._call_actor)(actor_params, obs_actor)

        # add noise to target policy
        action = actor_out[1]
        noise = torch.normal(mean=torch.zeros(action.shape),
                             std=torch.full(action.shape, self.policy_noise))
        noise = noise.clamp(-self.noise_clip, self.noise_clip)
        next_action = (action + noise).clamp(-self.max_action, self.max_action)

        n = self.num_qvalue_nets
        q_obs = torch.cat([obs.expand(n, *obs.shape), next_obs.expand(n, *obs.shape),
                           obs.expand(n, *obs.shape)], 0)
        q_act = torch.cat([actor_out[0].expand(n, *action.shape),
                           next_action.expand(n, *action.shape),
                           tensordict["action"].expand(n, *action.shape)], 0)

        # cat params
        q_params = self._q_params()
        target_q = self._target_q_params()
        qvalue_params = {k: torch.cat([v.detach(), target_q[k], v], 0) for k, v in q_params.items()}
        state_action_value = vmap(self._call_qvalue)(qvalue_params, q_obs, q_act).squeeze(-1)
        (state_action_value_actor, next_state_action_value_qvalue,
         state_action_value_qvalue) = state_action_value.split([n, n, n], dim=0)

        loss_actor = -(state_action_value_actor.min(0)[0]).mean()

        next_state_value = next_state_action_value_qvalue.min(0)[0]
        done = tensordict["next"]["done"]
        target_value = (tensordict["next"]["reward"]
                        + self.gamma * (1 - done) * next_state_value).detach()
        pred_val = state_action_value_qvalue
        loss_qval = (pred_val - target_value.expand_as(pred_val)).pow(2).mean(-1).sum() * 0.5

        return {"loss_actor": loss_actor, "loss_qvalue": loss_qval,
                "pred_value": pred_val.mean().detach(),
                "target_value": target_value.mean().detach()}


def collect_episode(env, actor, buffer, expl_std, random_policy=False):
    obs, done, ret = env.reset(), False, 0.0
    while not done:
        if random_policy:
            action = np.random.uniform(-1, 1, size=1).astype(np.float32)
        else:
            with torch.no_grad():
                action = actor(torch.as_tensor(obs)[None])[0].numpy()
            action = np.clip(action + expl_std * np.random.randn(*action.shape), -1, 1)
        next_obs, reward, done = env.step(action)
        buffer.extend(obs, action, reward, next_obs, done)
        obs, ret = next_obs, ret + reward
    return ret


def main():
    cfg = SimpleNamespace(seed=0, episodes=6, warmup_episodes=2, updates_per_episode=20,
                          batch_size=64, actor_lr=3e-4, critic_lr=3e-4, expl_std=0.1,
                          policy_delay=2)
    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)
    env = PointMassEnv(seed=cfg.seed)
    actor = Actor(2, 1)
    loss_module = TD3Loss(actor, QValue(2, 1))
    optim_actor = torch.optim.Adam(loss_module.actor_network_params.values(), lr=cfg.actor_lr)
    optim_value = torch.optim.Adam(loss_module.qvalue_parameters(), lr=cfg.critic_lr)
    buffer = ReplayBuffer(10000, 2, 1)

    step = 0
    for episode in range(cfg.episodes):
        ret = collect_episode(env, actor, buffer, cfg.expl_std,
                              random_policy=episode < cfg.warmup_episodes)
        if episode < cfg.warmup_episodes:
            continue
        for _ in range(cfg.updates_per_episode):
            loss = loss_module(buffer.sample(cfg.batch_size))
            if step % cfg.policy_delay == 0:
                optim_actor.zero_grad()
                loss["loss_actor"].backward()
                optim_actor.step()
            optim_value.zero_grad()
            loss["loss_qvalue"].backward()  # raises
            optim_value.step()
            loss_module.update_targets()
            step += 1
        print("episode {} return {:.2f} q {:.3f}".format(episode, ret, loss["pred_value"].item()))


if __name__ == "__main__":
    main()
