# expect: clean
# source: https://github.com/BY571/DQN-Atari-Agents/issues/5
"""DQN agent with n-step returns and proportional prioritized experience
replay (dqn+per), trained on a small vector environment.
"""
import argparse
import random
from collections import deque

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.nn.utils import clip_grad_norm_


def weight_init(layers):
    for layer in layers:
        torch.nn.init.kaiming_normal_(layer.weight, nonlinearity='relu')


class DDQN(nn.Module):
    def __init__(self, state_size, action_size, layer_size, n_step, seed):
        super(DDQN, self).__init__()
        self.seed = torch.manual_seed(seed)
        self.input_shape = state_size
        self.action_size = action_size
        self.head_1 = nn.Linear(self.input_shape[0], layer_size)
        self.ff_1 = nn.Linear(layer_size, layer_size)
        self.ff_2 = nn.Linear(layer_size, action_size)
        weight_init([self.head_1, self.ff_1])

    def forward(self, input):
        x = torch.relu(self.head_1(input))
        x = torch.relu(self.ff_1(x))
        return self.ff_2(x)


class PrioritizedReplay(object):
    """Proportional Prioritization"""

    def __init__(self, capacity, batch_size, seed, gamma=0.99, n_step=1, alpha=0.6,
                 beta_start=0.4, beta_frames=100000, parallel_env=1):
        self.alpha, self.beta_start, self.beta_frames = alpha, beta_start, beta_frames
        self.frame = 1  # for beta calculation
        self.batch_size, self.capacity = batch_size, capacity
        self.buffer = []
        self.pos = 0
        self.priorities = np.zeros((capacity,), dtype=np.float32)
        self.seed = np.random.seed(seed)
        self.n_step, self.parallel_env = n_step, parallel_env
        self.n_step_buffer = [deque(maxlen=self.n_step) for i in range(parallel_env)]
        self.iter_ = 0
        self.gamma = gamma

    def calc_multistep_return(self, n_step_buffer):
        Return = 0
        for idx in range(self.n_step):
            Return += self.gamma ** idx * n_step_buffer[idx][2]
        return n_step_buffer[0][0], n_step_buffer[0][1], Return, n_step_buffer[-1][3], n_step_buffer[-1][4]

    def beta_by_frame(self, frame_idx):
        """Linearly increases beta from beta_start to 1 over time from 1 to beta_frames."""
        return min(1.0, self.beta_start + frame_idx * (1.0 - self.beta_start) / self.beta_frames)

    def add(self, state, action, reward, next_state, done):
        if self.iter_ == self.parallel_env:
            self.iter_ = 0
        state = np.expand_dims(state, 0)
        next_state = np.expand_dims(next_state, 0)
        # n_step calc
        self.n_step_buffer[self.iter_].append((state, action, reward, next_state, done))
        if len(self.n_step_buffer[self.iter_]) == self.n_step:
            state, action, reward, next_state, done = self.calc_multistep_return(self.n_step_buffer[self.iter_])
        max_prio = self.priorities.max() if self.buffer else 1.0
        if len(self.buffer) < self.capacity:
            self.buffer.append((state, action, reward, next_state, done))
        else:
            self.buffer[self.pos] = (state, action, reward, next_state, done)
        self.priorities[self.pos] = max_prio
        self.pos = (self.pos + 1) % self.capacity
        self.iter_ += 1

    def sample(self):
        N = len(self.buffer)
        prios = self.priorities if N == self.capacity else self.priorities[:self.pos]
        # calc P = p^a/sum(p^a)
        probs = prios ** self.alpha
        P = probs / probs.sum()
        # gets the indices depending on the probability p
        indices = np.random.choice(N, self.batch_size, p=P)
        samples = [self.buffer[idx] for idx in indices]
        beta = self.beta_by_frame(self.frame)
        self.frame += 1
        # Compute importance-sampling weight
        weights = (N * P[indices]) ** (-beta)
        weights /= weights.max()
        weights = np.array(weights, dtype=np.float32)
        states, actions, rewards, next_states, dones = zip(*samples)
        return np.concatenate(states), actions, rewards, np.concatenate(next_states), dones, indices, weights

    def update_priorities(self, batch_indices, batch_priorities):
        for idx, prio in zip(batch_indices, batch_priorities):
            self.priorities[idx] = prio

    def __len__(self):
        return len(self.buffer)


class ScalarWriter:
    def __init__(self):
        self.data = {}

    def add_scalar(self, tag, value, step):
        self.data.setdefault(tag, []).append((step, float(np.mean(value))))


class DQN_Agent():
    """Interacts with and learns from the environment."""

    def __init__(self, state_size, action_size, Network, layer_size, n_step, BATCH_SIZE,
                 BUFFER_SIZE, LR, TAU, GAMMA, worker, device, seed):
        self.state_size, self.action_size = state_size, action_size
        self.seed = random.seed(seed)
        self.t_seed = torch.manual_seed(seed)
        self.device = device
        self.TAU, self.GAMMA = TAU, GAMMA
        self.UPDATE_EVERY = 1
        self.worker = worker
        self.BATCH_SIZE = BATCH_SIZE * worker
        self.Q_updates = 0
        self.n_step = n_step

        if "per" in Network:
            self.per = True
            Network = Network.strip("+per")
        else:
            self.per = False

        self.qnetwork_local = DDQN(state_size, action_size, layer_size, n_step, seed).to(device)
        self.qnetwork_target = DDQN(state_size, action_size, layer_size, n_step, seed).to(device)
        self.optimizer = optim.Adam(self.qnetwork_local.parameters(), lr=LR)
        self.memory = PrioritizedReplay(BUFFER_SIZE, BATCH_SIZE, seed=seed, gamma=self.GAMMA,
                                        n_step=n_step, parallel_env=self.worker)
        self.t_step = 0

    def step(self, state, action, reward, next_state, done, writer):
        # Save experience in replay memory
        self.memory.add(state, action, reward, next_state, done)
        # Learn every UPDATE_EVERY time steps.
        self.t_step = (self.t_step + 1) % self.UPDATE_EVERY
        if self.t_step == 0:
            if len(self.memory) > self.BATCH_SIZE:
                experiences = self.memory.sample()
                loss = self.learn_per(experiences)
                self.Q_updates += 1
                writer.add_scalar("Q_loss", loss, self.Q_updates)

    def act(self, state, eps=0., eval=False):
        """Returns actions for given state as per current policy."""
        if random.random() > eps:
            state = torch.from_numpy(np.array(state)).float().to(self.device)
            self.qnetwork_local.eval()
            with torch.no_grad():
                action_values = self.qnetwork_local(state)
            self.qnetwork_local.train()
            return np.argmax(action_values.cpu().data.numpy(), axis=1)
        return random.choices(np.arange(self.action_size), k=1 if eval else self.worker)

    def soft_update(self, local_model, target_model):
        """θ_target = τ*θ_local + (1 - τ)*θ_target"""
        for target_param, local_param in zip(target_model.parameters(), local_model.parameters()):
            target_param.data.copy_(self.TAU * local_param.data + (1.0 - self.TAU) * target_param.data)

    def learn_per(self, experiences):
        """Update value parameters using given batch of experience tuples."""
        self.optimizer.zero_grad()
        states, actions, rewards, next_states, dones, idx, weights = experiences

        states = torch.FloatTensor(states).to(self.device)
        next_states = torch.FloatTensor(np.float32(next_states)).to(self.device)
        actions = torch.LongTensor(actions).to(self.device).unsqueeze(1)
        rewards = torch.FloatTensor(rewards).to(self.device).unsqueeze(1)
        dones = torch.FloatTensor(dones).to(self.device).unsqueeze(1)
        weights = torch.FloatTensor(weights).unsqueeze(1).to(self.device)

        # Get max predicted Q values (for next states) from target model
        Q_targets_next = self.qnetwork_target(next_states).detach().max(1)[0].unsqueeze(1)
        # Compute Q targets for current states
        Q_targets = rewards + (self.GAMMA ** self.n_step * Q_targets_next * (1 - dones))
        # Get expected Q values from local model
        Q_expected = self.qnetwork_local(states).gather(1, actions)
        # Compute loss
        td_error = Q_targets - Q_expected
        loss = (td_error.pow(2) * weights).mean().to(self.device)
        # Minimize the loss
        loss.backward()
        clip_grad_norm_(self.qnetwork_local.parameters(), 1)
        self.optimizer.step()

        # ------------------- update target network ------------------- #
        self.soft_update(self.qnetwork_local, self.qnetwork_target)
        # update per priorities
        self.memory.update_priorities(idx, abs(td_error.data.cpu().numpy()).squeeze(1))
        return loss.detach().cpu().numpy()


class CorridorEnv:
    """Walk right along a corridor of length 10; +1 at the end, small step cost."""

    def __init__(self, length=10, seed=0):
        self.length, self.rng = length, np.random.RandomState(seed)

    def _obs(self):
        o = np.zeros(self.length, np.float32)
        o[self.pos] = 1.0
        return o

    def reset(self):
        self.pos, self.t = 0, 0
        return self._obs()

    def step(self, action):
        self.t += 1
        if self.rng.rand() > 0.1:
            self.pos = int(np.clip(self.pos + (1 if action == 1 else -1), 0, self.length - 1))
        done = self.pos == self.length - 1 or self.t >= 30
        reward = 1.0 if self.pos == self.length - 1 else -0.01
        return self._obs(), reward, done, {}


def run(agent, env, writer, frames=400, eps_frames=300, min_eps=0.05):
    eps, scores, score = 1.0, deque(maxlen=20), 0.0
    state = env.reset()
    for frame in range(1, frames + 1):
        action = agent.act(state[None], eps)[0]
        next_state, reward, done, _ = env.step(int(action))
        agent.step(state, int(action), reward, next_state, done, writer)
        state, score = next_state, score + reward
        eps = max(1.0 - frame * (1.0 - min_eps) / eps_frames, min_eps)
        if done:
            scores.append(score)
            state, score = env.reset(), 0.0
    return np.mean(scores) if scores else 0.0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("-agent", type=str, default="dqn+per")
    parser.add_argument("-frames", type=int, default=400)
    parser.add_argument("-bs", "--batch_size", type=int, default=16)
    parser.add_argument("-layer_size", type=int, default=32)
    parser.add_argument("-n_step", type=int, default=1)
    parser.add_argument("-lr", type=float, default=1e-3)
    parser.add_argument("-t", "--tau", type=float, default=1e-2)
    parser.add_argument("-g", "--gamma", type=float, default=0.99)
    parser.add_argument("-seed", type=int, default=1)
    args = parser.parse_args([])
    np.random.seed(args.seed)
    env = CorridorEnv(seed=args.seed)
    agent = DQN_Agent(state_size=(10,), action_size=2, Network=args.agent, layer_size=args.layer_size,
                      n_step=args.n_step, BATCH_SIZE=args.batch_size, BUFFER_SIZE=5000, LR=args.lr,
                      TAU=args.tau, GAMMA=args.gamma, worker=1, device="cpu", seed=args.seed)
    print("average score", run(agent, env, ScalarWriter(), frames=args.frames))
