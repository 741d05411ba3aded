# expect: clean
# source: https://github.com/metaopt/torchopt/issues/221
"""PPO with a learned reward network over a multi-objective reward vector (PPO_meta.py).

The agent follows the usual PPO-PyTorch layout (RolloutBuffer, ActorCritic, PPO.update with
K epochs over the collected batch).  Besides the environment reward, every step yields a
vector of objective rewards `reward_g`; a RewardNet maps the state to mixing weights, the
weighted reward is turned into discounted returns, and a second critic head (`critic_g`)
plus the clipped surrogate are trained on those learned returns.  Toy numpy environment.
"""
import numpy as np
import torch
import torch.nn as nn
from torch.distributions import Categorical

torch.manual_seed(0)
np.random.seed(0)


class ForagingEnv:
    """1-D corridor: go left for food (objective 0), right for water (objective 1)."""

    def __init__(self, length=7, max_steps=20):
        self.length, self.max_steps = length, max_steps
        self.state_dim, self.action_dim = 4, 3

    def _obs(self):
        return np.array([self.pos / self.length, self.hunger, self.thirst, self.t / self.max_steps], dtype=np.float32)

    def reset(self):
        self.pos, self.t = self.length // 2, 0
        self.hunger, self.thirst = np.random.rand(), np.random.rand()
        return self._obs()

    def step(self, action):
        self.pos = int(np.clip(self.pos + (action - 1), 0, self.length - 1))
        self.t += 1
        reward_g = np.zeros(2, dtype=np.float32)
        if self.pos == 0:
            reward_g[0], self.hunger = self.hunger, 0.0
        if self.pos == self.length - 1:
            reward_g[1], self.thirst = self.thirst, 0.0
        self.hunger, self.thirst = min(1.0, self.hunger + 0.05), min(1.0, self.thirst + 0.05)
        reward = float(reward_g.sum()) - 0.01
        done = self.t >= self.max_steps
        return self._obs(), reward, reward_g, done


class RolloutBuffer:
    def __init__(self):
        self.actions, self.states, self.logprobs = [], [], []
        self.rewards, self.rewards_g, self.state_values, self.state_values_g, self.is_terminals = [], [], [], [], []

    def clear(self):
        self.__init__()


class ActorCritic(nn.Module):
    def __init__(self, state_dim, action_dim, hidden=32):
        super().__init__()
        self.actor = nn.Sequential(nn.Linear(state_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                                   nn.Linear(hidden, action_dim), nn.Softmax(dim=-1))
        self.critic = nn.Sequential(nn.Linear(state_dim, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        self.critic_g = nn.Sequential(nn.Linear(state_dim, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def act(self, state):
        dist = Categorical(self.actor(state))
        action = dist.sample()
        return action.detach(), dist.log_prob(action).detach(), self.critic(state).detach(), \
            self.critic_g(state).detach()

    def evaluate(self, state, action):
        dist = Categorical(self.actor(state))
        return dist.log_prob(action), self.critic(state), self.critic_g(state), dist.entropy()


class RewardNet(nn.Module):
    """State-dependent mixing weights over the objective rewards."""

    def __init__(self, state_dim, n_objectives, hidden=16):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(state_dim, hidden), nn.ReLU(), nn.Linear(hidden, n_objectives))

    def forward(self, state):
        return torch.softmax(self.net(state), dim=-1)


class PPO:
    def __init__(self, state_dim, action_dim, n_objectives, lr_actor=3e-4, lr_critic=1e-3, lr_reward=1e-3,
                 gamma=0.99, K_epochs=4, eps_clip=0.2):
        self.gamma, self.eps_clip, self.K_epochs = gamma, eps_clip, K_epochs
        self.buffer = RolloutBuffer()
        self.policy = ActorCritic(state_dim, action_dim)
        self.rewardnet = RewardNet(state_dim, n_objectives)
        self.optimizer = torch.optim.Adam([
            {'params': self.policy.actor.parameters(), 'lr': lr_actor},
            {'params': self.policy.critic.parameters(), 'lr': lr_critic},
            {'params': self.policy.critic_g.parameters(), 'lr': lr_critic},
            {'params': self.rewardnet.parameters(), 'lr': lr_reward},
        ])
        self.policy_old = ActorCritic(state_dim, action_dim)
        self.policy_old.load_state_dict(self.policy.state_dict())
        self.MseLoss = nn.MSELoss()

    def select_action(self, state):
        with torch.no_grad():
            state = torch.FloatTensor(state)
            action, action_logprob, state_val, state_val_g = self.policy_old.act(state)
        self.buffer.states.append(state)
        self.buffer.actions.append(action)
        self.buffer.logprobs.append(action_logprob)
        self.buffer.state_values.append(state_val)
        self.buffer.state_values_g.append(state_val_g)
        return action.item()

    def _monte_carlo_returns(self):
        rewards, discounted_reward = [], 0
        for reward, is_terminal in zip(reversed(self.buffer.rewards), reversed(self.buffer.is_terminals)):
            if is_terminal:
                discounted_reward = 0
            discounted_reward = reward + (self.gamma * discounted_reward)
            rewards.insert(0, discounted_reward)
        rewards = torch.tensor(rewards, dtype=torch.float32)
        return (rewards - rewards.mean()) / (rewards.std() + 1e-7)

    def _learned_returns(self):
        rewards_g, discounted_reward = [], 0
        for reward_g, is_terminal, state in zip(reversed(self.buffer.rewards_g), reversed(self.buffer.is_terminals),
                                                reversed(self.buffer.states)):
            if is_terminal:
                discounted_reward = 0
            w = self.rewardnet(state)
            r = torch.dot(w, torch.FloatTensor(reward_g))
            discounted_reward = r + (self.gamma * discounted_reward)
            rewards_g.insert(0, discounted_reward)
        rewards_g = torch.stack(rewards_g)
        return (rewards_g - rewards_g.mean()) / (rewards_g.std() + 1e-7)

    def update(self):
        rewards = self._monte_carlo_returns()

        old_states = torch.stack(self.buffer.states, dim=0).detach()
        old_actions = torch.stack(self.buffer.actions, dim=0).detach()
        old_logprobs = torch.stack(self.buffer.logprobs, dim=0).detach()
        old_state_values = torch.stack(self.buffer.state_values, dim=0).squeeze(-1).detach()
        old_state_values_g = torch.stack(self.buffer.state_values_g, dim=0).squeeze(-1).detach()
        advantages = rewards - old_state_values

        # Optimize policy for K epochs
        for _ in range(self.K_epochs):
            # the learned returns are rebuilt every epoch: each backward needs its own reward-net graph
            rewards_g = self._learned_returns()
            advantages_g = rewards_g - old_state_values_g
            logprobs, state_values, state_values_g, dist_entropy = self.policy.evaluate(old_states, old_actions)
            state_values, state_values_g = torch.squeeze(state_values), torch.squeeze(state_values_g)
            ratios = torch.exp(logprobs - old_logprobs)
            surr1_g = ratios * (advantages_g + advantages)
            surr2_g = torch.clamp(ratios, 1 - self.eps_clip, 1 + self.eps_clip) * (advantages_g + advantages)
            loss = -torch.min(surr1_g, surr2_g) + 0.5 * self.MseLoss(state_values, rewards) \
                + 0.5 * self.MseLoss(state_values_g, rewards_g) - 0.01 * dist_entropy
            self.optimizer.zero_grad()
            loss.mean().backward()
            nn.utils.clip_grad_norm_(self.policy.parameters(), 0.5)
            self.optimizer.step()

        self.policy_old.load_state_dict(self.policy.state_dict())
        self.buffer.clear()


def evaluate_policy(agent, env, episodes=3):
    total = 0.0
    for _ in range(episodes):
        state, done = env.reset(), False
        while not done:
            with torch.no_grad():
                action = agent.policy.actor(torch.FloatTensor(state)).argmax().item()
            state, reward, _, done = env.step(action)
            total += reward
    return total / episodes


def train(max_training_timesteps=240, update_timestep=80):
    env = ForagingEnv()
    agent = PPO(env.state_dim, env.action_dim, n_objectives=2)
    time_step, i_episode = 0, 0
    while time_step <= max_training_timesteps:
        state, done, ep_reward = env.reset(), False, 0.0
        while not done:
            action = agent.select_action(state)
            state, reward, reward_g, done = env.step(action)
            agent.buffer.rewards.append(reward)
            agent.buffer.rewards_g.append(reward_g)
            agent.buffer.is_terminals.append(done)
            time_step += 1
            ep_reward += reward
            if time_step % update_timestep == 0:
                agent.update()
                print(f'step {time_step}: eval return {evaluate_policy(agent, env):.3f}')
        i_episode += 1
    return agent


if __name__ == '__main__':
    train()
