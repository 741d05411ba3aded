# expect: clean
# source: https://github.com/QasimWani/RL-Unity/issues/5
"""Multi-agent DDPG (MADDPG) for a two-player cooperative "tennis"-like task.

Each agent has a local/target actor and a centralized critic that sees the joint
observation and joint action.  A shared replay buffer feeds the learning step,
which updates every agent in turn.  The Unity environment is replaced by a small
synthetic rally environment so the program runs on CPU in seconds.
"""
import copy
import random
from collections import deque, namedtuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

BUFFER_SIZE = int(1e4)
BATCH_SIZE = 32
GAMMA = 0.99
TAU = 1e-2
LR_ACTOR = 1e-3
LR_CRITIC = 1e-3
N_LEARN_UPDATES = 2
N_TIME_STEPS = 1


def hidden_init(layer):
    fan_in = layer.weight.data.size()[1]
    lim = 1.0 / np.sqrt(fan_in)
    return (-lim, lim)


class Actor(nn.Module):
    def __init__(self, state_size, action_size, seed, fc1_units=64, fc2_units=32):
        super().__init__()
        torch.manual_seed(seed)
        self.fc1 = nn.Linear(state_size, fc1_units)
        self.fc2 = nn.Linear(fc1_units, fc2_units)
        self.fc3 = nn.Linear(fc2_units, action_size)
        self.reset_parameters()

    def reset_parameters(self):
        self.fc1.weight.data.uniform_(*hidden_init(self.fc1))
        self.fc2.weight.data.uniform_(*hidden_init(self.fc2))
        self.fc3.weight.data.uniform_(-3e-3, 3e-3)

    def forward(self, state):
        x = F.relu(self.fc1(state))
        x = F.relu(self.fc2(x))
        return torch.tanh(self.fc3(x))


class Critic(nn.Module):
    """Centralized critic: Q(all states, all actions)."""

    def __init__(self, full_state_size, full_action_size, seed, fcs1_units=64, fc2_units=32):
        super().__init__()
        torch.manual_seed(seed)
        self.fcs1 = nn.Linear(full_state_size, fcs1_units)
        self.fc2 = nn.Linear(fcs1_units + full_action_size, fc2_units)
        self.fc3 = nn.Linear(fc2_units, 1)

    def forward(self, states, actions):
        xs = F.relu(self.fcs1(states))
        x = torch.cat((xs, actions), dim=1)
        return self.fc3(F.relu(self.fc2(x)))


class OUNoise:
    def __init__(self, size, seed, mu=0.0, theta=0.15, sigma=0.2):
        self.mu = mu * np.ones(size)
        self.theta, self.sigma = theta, sigma
        self.rng = np.random.RandomState(seed)
        self.reset()

    def reset(self):
        self.state = copy.copy(self.mu)

    def sample(self):
        dx = self.theta * (self.mu - self.state) + self.sigma * self.rng.standard_normal(len(self.state))
        self.state = self.state + dx
        return self.state


class ReplayBuffer:
    def __init__(self, buffer_size, batch_size, seed):
        self.memory = deque(maxlen=buffer_size)
        self.batch_size = batch_size
        self.experience = namedtuple("Experience", ["states", "actions", "rewards", "next_states", "dones"])
        random.seed(seed)

    def add(self, states, actions, rewards, next_states, dones):
        self.memory.append(self.experience(states, actions, rewards, next_states, dones))

    def sample(self):
        batch = random.sample(self.memory, k=self.batch_size)

        def stack(field):
            return torch.from_numpy(np.stack([getattr(e, field) for e in batch])).float()

        return tuple(stack(f) for f in self.experience._fields)

    def __len__(self):
        return len(self.memory)


class Agent:
    def __init__(self, index, num_agents, state_size, action_size, seed):
        self.index = index
        self.action_size = action_size
        self.actor_local = Actor(state_size, action_size, seed)
        self.actor_target = Actor(state_size, action_size, seed)
        self.actor_optimizer = torch.optim.Adam(self.actor_local.parameters(), lr=LR_ACTOR)
        self.critic_local = Critic(num_agents * state_size, num_agents * action_size, seed)
        self.critic_target = Critic(num_agents * state_size, num_agents * action_size, seed)
        self.critic_optimizer = torch.optim.Adam(self.critic_local.parameters(), lr=LR_CRITIC)
        self.noise = OUNoise(action_size, seed + index)
        self.hard_update(self.actor_target, self.actor_local)
        self.hard_update(self.critic_target, self.critic_local)

    def act(self, state, add_noise=True):
        state = torch.from_numpy(state).float().unsqueeze(0)
        self.actor_local.eval()
        with torch.no_grad():
            action = self.actor_local(state).squeeze(0).numpy()
        self.actor_local.train()
        if add_noise:
            action = action + self.noise.sample()
        return np.clip(action, -1, 1)

    def reset(self):
        self.noise.reset()

    def learn(self, experiences, gamma, actions_next, actions_pred):
        states, actions, rewards, next_states, dones = experiences
        b = states.shape[0]
        full_states = states.view(b, -1)
        full_next_states = next_states.view(b, -1)
        full_actions = actions.view(b, -1)

        # ---------------------------- update critic ---------------------------- #
        with torch.no_grad():
            q_next = self.critic_target(full_next_states, torch.cat(actions_next, dim=1))
            q_targets = rewards[:, self.index:self.index + 1] + gamma * q_next * (1 - dones[:, self.index:self.index + 1])
        q_expected = self.critic_local(full_states, full_actions)
        critic_loss = F.mse_loss(q_expected, q_targets)
        self.critic_optimizer.zero_grad()
        critic_loss.backward()
        torch.nn.utils.clip_grad_norm_(self.critic_local.parameters(), 1.0)
        self.critic_optimizer.step()

        # ---------------------------- update actor ----------------------------- #
        actor_loss = -self.critic_local(full_states, torch.cat(actions_pred, dim=1)).mean()
        self.actor_optimizer.zero_grad()
        actor_loss.backward(retain_graph=True)
        self.actor_optimizer.step()

        self.soft_update(self.critic_local, self.critic_target, TAU)
        self.soft_update(self.actor_local, self.actor_target, TAU)
        return critic_loss.item(), actor_loss.item()

    @staticmethod
    def soft_update(local_model, target_model, tau):
        for target_param, local_param in zip(target_model.parameters(), local_model.parameters()):
            target_param.data.copy_(tau * local_param.data + (1.0 - tau) * target_param.data)

    @staticmethod
    def hard_update(target, source):
        for target_param, param in zip(target.parameters(), source.parameters()):
            target_param.data.copy_(param.data)


class MADDPG:
    def __init__(self, num_agents=2, state_size=8, action_size=2, random_seed=2):
        self.num_agents = num_agents
        self.agents = [Agent(i, num_agents, state_size, action_size, random_seed) for i in range(num_agents)]
        self.memory = ReplayBuffer(BUFFER_SIZE, BATCH_SIZE, random_seed)
        self.losses = []

    def act(self, states, add_noise=True):
        return np.stack([agent.act(s, add_noise) for s, agent in zip(states, self.agents)])

    def reset(self):
        for agent in self.agents:
            agent.reset()

    def step(self, time_step, states, actions, rewards, next_states, dones):
        self.memory.add(states, actions, rewards, next_states, dones)
        if time_step % N_TIME_STEPS != 0:
            return
        if len(self.memory) > BATCH_SIZE:
            for _ in range(N_LEARN_UPDATES):
                self.learn(self.memory.sample())

    def learn(self, experiences, gamma=GAMMA):
        states, _, _, next_states, _ = experiences
        with torch.no_grad():
            actions_next = [a.actor_target(next_states[:, i]) for i, a in enumerate(self.agents)]
        actions_pred = [a.actor_local(states[:, i]) for i, a in enumerate(self.agents)]
        for i, agent in enumerate(self.agents):
            agent_actions = [a if j == i else a.detach() for j, a in enumerate(actions_pred)]
            self.losses.append(agent.learn(experiences, gamma, actions_next, agent_actions))


class RallyEnv:
    """Two paddles keep a ball in the air; reward when a paddle meets the ball."""

    def __init__(self, seed, state_size=8):
        self.rng = np.random.RandomState(seed)
        self.state_size = state_size

    def reset(self):
        self.t = 0
        self.state = self.rng.uniform(-1, 1, size=(2, self.state_size))
        return self.state.copy()

    def step(self, actions):
        self.t += 1
        self.state[:, :2] += 0.1 * actions
        self.state[:, 2:] = np.roll(self.state[:, 2:], 1, axis=1)
        dist = np.abs(self.state[:, 0] - self.state[:, 2])
        rewards = np.where(dist < 0.3, 0.1, -0.01)
        dones = np.array([self.t >= 25] * 2, dtype=np.float32)
        return self.state.copy(), rewards.astype(np.float32), dones


def main():
    np.random.seed(0)
    torch.manual_seed(0)
    env = RallyEnv(seed=0)
    maddpg = MADDPG(num_agents=2, state_size=env.state_size, action_size=2, random_seed=2)
    scores = deque(maxlen=10)
    for episode in range(3):
        states = env.reset()
        maddpg.reset()
        score = np.zeros(2)
        for t in range(25):
            actions = maddpg.act(states)
            next_states, rewards, dones = env.step(actions)
            maddpg.step(t, states, actions, rewards, next_states, dones)
            states = next_states
            score += rewards
            if dones.any():
                break
        scores.append(score.max())
        print(f"episode {episode} avg score {np.mean(scores):.3f}")


if __name__ == "__main__":
    main()
