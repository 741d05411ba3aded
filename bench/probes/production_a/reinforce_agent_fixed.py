# expect: clean
# source: https://github.com/kengz/SLM-Lab/pull/133
"""REINFORCE agent (spec-driven, SLM-Lab style) on a small synthetic corridor environment."""
import time

import numpy as np
import torch
import torch.nn as nn
from torch.distributions import Categorical

SPEC = {
    "agent": {
        "name": "Reinforce",
        "algorithm": {
            "gamma": 0.99,
            "center_return": True,
            "entropy_coef": 0.0,
            "training_frequency": 1,
        },
        "memory": {"name": "OnPolicyReplay"},
        "net": {
            "hid_layers": [32, 32],
            "hid_layers_activation": "relu",
            "clip_grad_val": 0.5,
            "optim_spec": {"name": "Adam", "lr": 0.01},
        },
    },
    "env": {"name": "Corridor", "length": 6, "max_t": 20, "max_episode": 4},
    "meta": {"random_seed": 0, "log_frequency": 1},
}


class CorridorEnv:
    """Agent starts at cell 0 and is rewarded for reaching the right end."""

    def __init__(self, spec):
        self.length = spec["length"]
        self.max_t = spec["max_t"]
        self.observation_dim = self.length
        self.action_dim = 2
        self.pos = 0
        self.t = 0

    def _obs(self):
        o = np.zeros(self.length, dtype=np.float32)
        o[self.pos] = 1.0
        return o

    def reset(self):
        self.pos, self.t = 0, 0
        return self._obs()

    def step(self, action):
        self.t += 1
        self.pos = min(max(self.pos + (1 if action == 1 else -1), 0), self.length - 1)
        done = self.pos == self.length - 1 or self.t >= self.max_t
        reward = 1.0 if self.pos == self.length - 1 else -0.01
        return self._obs(), reward, done, {}


class OnPolicyReplay:
    data_keys = ["states", "actions", "rewards", "dones", "log_probs", "entropies"]

    def __init__(self):
        self.reset()

    def reset(self):
        for k in self.data_keys:
            setattr(self, k, [])
        self.size = 0

    def update(self, state, action, reward, done, log_prob, entropy):
        self.states.append(state)
        self.actions.append(action)
        self.rewards.append(reward)
        self.dones.append(done)
        self.log_probs.append(log_prob)
        self.entropies.append(entropy)
        self.size += 1

    def sample(self):
        batch = {k: getattr(self, k) for k in self.data_keys}
        self.reset()
        return batch


class MLPNet(nn.Module):
    def __init__(self, net_spec, in_dim, out_dim):
        super().__init__()
        layers, d = [], in_dim
        act = {"relu": nn.ReLU, "tanh": nn.Tanh}[net_spec["hid_layers_activation"]]
        for h in net_spec["hid_layers"]:
            layers += [nn.Linear(d, h), act()]
            d = h
        layers.append(nn.Linear(d, out_dim))
        self.model = nn.Sequential(*layers)
        self.clip_grad_val = net_spec["clip_grad_val"]
        optim_spec = dict(net_spec["optim_spec"])
        optim_cls = getattr(torch.optim, optim_spec.pop("name"))
        self.optim = optim_cls(self.parameters(), **optim_spec)

    def forward(self, x):
        return self.model(x)

    def train_step(self, loss):
        self.optim.zero_grad()
        loss.backward()
        if self.clip_grad_val is not None:
            nn.utils.clip_grad_norm_(self.parameters(), self.clip_grad_val)
        self.optim.step()
        return loss


class Reinforce:
    def __init__(self, spec, env):
        self.algorithm_spec = spec["agent"]["algorithm"]
        self.gamma = self.algorithm_spec["gamma"]
        self.entropy_coef = self.algorithm_spec["entropy_coef"]
        self.net = MLPNet(spec["agent"]["net"], env.observation_dim, env.action_dim)
        self.memory = OnPolicyReplay()
        self.to_train = 0

    def act(self, state):
        pdparam = self.net(torch.from_numpy(state))
        dist = Categorical(logits=pdparam)
        action = dist.sample()
        return action.item(), dist.log_prob(action), dist.entropy()

    def calc_ret_advs(self, batch):
        rets = np.zeros(len(batch["rewards"]), dtype=np.float32)
        future = 0.0
        for t in reversed(range(len(rets))):
            future = batch["rewards"][t] + self.gamma * future * (1 - batch["dones"][t])
            rets[t] = future
        rets = torch.from_numpy(rets)
        if self.algorithm_spec["center_return"]:
            rets = rets - rets.mean()
        return rets

    def calc_policy_loss(self, batch, advs):
        log_probs = torch.stack(batch["log_probs"])
        policy_loss = -(log_probs * advs).mean()
        if self.entropy_coef > 0:
            entropies = torch.stack(batch["entropies"])
            policy_loss = policy_loss - self.entropy_coef * entropies.mean()
        return policy_loss

    def train(self):
        if not self.to_train:
            return np.nan
        batch = self.memory.sample()
        advs = self.calc_ret_advs(batch)
        loss = self.calc_policy_loss(batch, advs)
        self.net.train_step(loss)
        self.to_train = 0
        return loss.item()


def run(spec):
    seed = spec["meta"]["random_seed"]
    torch.manual_seed(seed)
    np.random.seed(seed)
    env = CorridorEnv(spec["env"])
    agent = Reinforce(spec, env)
    t0 = time.time()
    for epi in range(spec["env"]["max_episode"]):
        state, done, total_reward = env.reset(), False, 0.0
        while not done:
            action, log_prob, entropy = agent.act(state)
            next_state, reward, done, _ = env.step(action)
            agent.memory.update(state, action, reward, float(done), log_prob, entropy)
            total_reward += reward
            state = next_state
        agent.to_train = 1
        loss = agent.train()
        if epi % spec["meta"]["log_frequency"] == 0:
            print("episode %d  return %.3f  loss %.4f  steps %d" % (epi, total_reward, loss, env.t))
    print("wall time %.2fs" % (time.time() - t0))


if __name__ == "__main__":
    run(SPEC)
