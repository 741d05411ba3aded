# expect: inplace_version
# source: https://github.com/PacktPublishing/Deep-Reinforcement-Learning-Hands-On-Second-Edition/issues/21
"""Stock-trading DQN (Deep RL Hands-On, chapter 10) with the last two linear
layers of the dueling feed-forward net replaced by NoisyLinear layers.

A synthetic random-walk price series drives a small trading environment
(actions: skip / buy / close).  Experience goes through an n-step experience
source into a replay buffer; the net is trained with a double-DQN loss against
a periodically synced target net, with periodic value-of-states evaluation.
"""
import copy
import math
import random
from collections import deque, namedtuple
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

Experience = namedtuple("Experience", ["state", "action", "reward", "last_state"])

HPARAMS = SimpleNamespace(
    batch_size=32, bars_count=10, gamma=0.99, reward_steps=2,
    replay_size=5000, replay_initial=200, learning_rate=1e-4,
    eps_start=1.0, eps_final=0.1, eps_steps=2000,
    sync_every=50, eval_every=50, states_to_evaluate=64,
    max_iters=120, seed=1,
)


class NoisyLinear(nn.Linear):
    def __init__(self, in_features, out_features, sigma_init=0.017, bias=True):
        super(NoisyLinear, self).__init__(in_features, out_features, bias=bias)
        self.sigma_weight = nn.Parameter(torch.full((out_features, in_features), sigma_init))
        self.register_buffer("epsilon_weight", torch.zeros(out_features, in_features))
        if bias:
            self.sigma_bias = nn.Parameter(torch.full((out_features,), sigma_init))
            self.register_buffer("epsilon_bias", torch.zeros(out_features))
        self.reset_parameters()

    def reset_parameters(self):
        std = math.sqrt(3 / self.in_features)
        self.weight.data.uniform_(-std, std)
        self.bias.data.uniform_(-std, std)

    def forward(self, input):
        self.epsilon_weight.normal_()
        bias = self.bias
        if bias is not None:
            self.epsilon_bias.normal_()
            bias = bias + self.sigma_bias * self.epsilon_bias
        return F.linear(input, self.weight + self.sigma_weight * self.epsilon_weight, bias)


class SimpleFFDQN(nn.Module):
    def __init__(self, obs_len, actions_n):
        super(SimpleFFDQN, self).__init__()
        self.fc_val = nn.Sequential(
            nn.Linear(obs_len, 64), nn.ReLU(),
            nn.Linear(64, 64), nn.ReLU(),
            NoisyLinear(64, 1),
        )
        self.fc_adv = nn.Sequential(
            nn.Linear(obs_len, 64), nn.ReLU(),
            nn.Linear(64, 64), nn.ReLU(),
            NoisyLinear(64, actions_n),
        )

    def forward(self, x):
        val = self.fc_val(x)
        adv = self.fc_adv(x)
        return val + (adv - adv.mean(dim=1, keepdim=True))


class TargetNet:
    def __init__(self, model):
        self.model = model
        self.target_model = copy.deepcopy(model)

    def sync(self):
        self.target_model.load_state_dict(self.model.state_dict())


class StocksEnv:
    """Minimal bar-based trading env: observation = last `bars_count` relative closes + position flags."""
    def __init__(self, prices, bars_count, commission=0.001):
        self.prices = prices
        self.bars_count = bars_count
        self.commission = commission
        self.obs_len = bars_count + 2
        self.actions_n = 3

    def reset(self):
        self.offset = random.randint(self.bars_count, len(self.prices) - 100)
        self.have_position = False
        self.open_price = 0.0
        return self._obs()

    def _obs(self):
        window = self.prices[self.offset - self.bars_count:self.offset]
        rel = window / window[-1] - 1.0
        pos = [float(self.have_position),
               (self.prices[self.offset] / self.open_price - 1.0) if self.have_position else 0.0]
        return np.concatenate([rel, pos]).astype(np.float32)

    def step(self, action):
        reward, done = 0.0, False
        close = self.prices[self.offset]
        if action == 1 and not self.have_position:
            self.have_position, self.open_price = True, close
            reward -= self.commission
        elif action == 2 and self.have_position:
            reward += 100.0 * (close / self.open_price - 1.0) - self.commission
            self.have_position, done = False, True
        self.offset += 1
        done = done or self.offset >= len(self.prices) - 1
        return self._obs(), reward, done


class EpsilonGreedyAgent:
    def __init__(self, net, hp):
        self.net, self.hp, self.epsilon = net, hp, hp.eps_start

    def track(self, frame):
        self.epsilon = max(self.hp.eps_final, self.hp.eps_start - frame / self.hp.eps_steps)

    @torch.no_grad()
    def __call__(self, state):
        if random.random() < self.epsilon:
            return random.randrange(3)
        q = self.net(torch.tensor(state).unsqueeze(0))
        return int(q.argmax(dim=1).item())


class ExperienceSourceFirstLast:
    """n-step experience source: yields (first state, action, discounted reward, last state)."""
    def __init__(self, env, agent, gamma, steps_count):
        self.env, self.agent, self.gamma, self.steps = env, agent, gamma, steps_count
        self.state = env.reset()
        self.window = deque(maxlen=steps_count)

    def __iter__(self):
        while True:
            action = self.agent(self.state)
            next_state, reward, done = self.env.step(action)
            self.window.append((self.state, action, reward))
            if len(self.window) == self.steps or done:
                total = sum(r * self.gamma ** i for i, (_, _, r) in enumerate(self.window))
                first_state, first_action, _ = self.window[0]
                yield Experience(first_state, first_action, total, None if done else next_state)
            self.state = next_state
            if done:
                self.state = self.env.reset()
                self.window.clear()


class ExperienceReplayBuffer:
    def __init__(self, exp_source, size):
        self.it = iter(exp_source)
        self.buffer = deque(maxlen=size)

    def populate(self, n):
        for _ in range(n):
            self.buffer.append(next(self.it))

    def sample(self, batch_size):
        return random.sample(list(self.buffer), batch_size)


def unpack_batch(batch):
    states, actions, rewards, dones, last_states = [], [], [], [], []
    for exp in batch:
        states.append(exp.state)
        actions.append(exp.action)
        rewards.append(exp.reward)
        dones.append(exp.last_state is None)
        last_states.append(exp.state if exp.last_state is None else exp.last_state)
    return np.array(states), np.array(actions), np.array(rewards, dtype=np.float32), \
        np.array(dones, dtype=np.uint8), np.array(last_states)


def calc_loss(batch, net, tgt_net, gamma):
    states, actions, rewards, dones, next_states = unpack_batch(batch)
    states_v = torch.tensor(states)
    next_states_v = torch.tensor(next_states)
    actions_v = torch.tensor(actions)
    rewards_v = torch.tensor(rewards)
    done_mask = torch.BoolTensor(dones)

    state_action_values = net(states_v).gather(1, actions_v.unsqueeze(-1)).squeeze(-1)
    next_state_actions = net(next_states_v).max(1)[1]
    next_state_values = tgt_net(next_states_v).gather(1, next_state_actions.unsqueeze(-1)).squeeze(-1)
    next_state_values[done_mask] = 0.0

    expected_state_action_values = next_state_values.detach() * gamma + rewards_v
    return nn.MSELoss()(state_action_values, expected_state_action_values)


@torch.no_grad()
def calc_values_of_states(states, net):
    mean_vals = []
    for batch in np.array_split(states, 4):
        action_values_v = net(torch.tensor(batch))
        mean_vals.append(action_values_v.max(1)[0].mean().item())
    return np.mean(mean_vals)


class Trainer:
    def __init__(self, hp, net, buffer, agent):
        self.hp, self.net, self.buffer, self.agent = hp, net, buffer, agent
        self.tgt_net = TargetNet(net)
        self.optimizer = torch.optim.Adam(net.parameters(), lr=hp.learning_rate)
        self.eval_states = None
        self.best_mean_val = None
        self.handlers = {"sync": [self.sync_eval]}

    def train_step(self, iteration, batch):
        self.optimizer.zero_grad()
        loss_v = calc_loss(batch, self.net, self.tgt_net.target_model,
                           gamma=self.hp.gamma ** self.hp.reward_steps)
        loss_v.backward()  # raises
        self.optimizer.step()
        self.agent.track(iteration)
        if self.eval_states is None:
            self.eval_states = np.array([t.state for t in self.buffer.sample(self.hp.states_to_evaluate)])
        return {"loss": loss_v.item(), "epsilon": self.agent.epsilon}

    def sync_eval(self, iteration):
        self.tgt_net.sync()
        mean_val = calc_values_of_states(self.eval_states, self.net)
        if self.best_mean_val is None or self.best_mean_val < mean_val:
            print("%d: Best mean value updated %s -> %.3f" % (iteration, self.best_mean_val, mean_val))
            self.best_mean_val = mean_val

    def run(self):
        self.buffer.populate(self.hp.replay_initial)
        for iteration in range(1, self.hp.max_iters + 1):
            self.buffer.populate(1)
            out = self.train_step(iteration, self.buffer.sample(self.hp.batch_size))
            if iteration % self.hp.sync_every == 0:
                for handler in self.handlers["sync"]:
                    handler(iteration)
                print("iter %d: loss=%.5f eps=%.3f" % (iteration, out["loss"], out["epsilon"]))


def main():
    hp = HPARAMS
    random.seed(hp.seed)
    np.random.seed(hp.seed)
    torch.manual_seed(hp.seed)
    prices = 100.0 * np.exp(np.cumsum(np.random.normal(0, 0.01, size=2000)))
    env = StocksEnv(prices, bars_count=hp.bars_count)
    net = SimpleFFDQN(env.obs_len, env.actions_n)
    agent = EpsilonGreedyAgent(net, hp)
    exp_source = ExperienceSourceFirstLast(env, agent, hp.gamma, steps_count=hp.reward_steps)
    buffer = ExperienceReplayBuffer(exp_source, hp.replay_size)
    Trainer(hp, net, buffer, agent).run()


if __name__ == "__main__":
    main()
