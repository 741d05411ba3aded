# expect: inplace_version
# source: https://github.com/philtabor/Multi-Agent-Deep-Deterministic-Policy-Gradients/issues/2
"""MADDPG for a small cooperative-navigation task.

Each agent owns an actor, a centralized critic and their target copies. A
shared multi-agent replay buffer stores joint transitions; the MADDPG wrapper
collects target/current actions for every agent and then updates critics and
actors agent by agent, followed by soft target updates. The environment is a
seeded synthetic point-mass world, so the whole run is CPU-only and short.
"""
import argparse

import numpy as np
import torch as T
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="MADDPG cooperative navigation")
    p.add_argument("--n-agents", type=int, default=2)
    p.add_argument("--obs-dim", type=int, default=4)
    p.add_argument("--n-actions", type=int, default=2)
    p.add_argument("--alpha", type=float, default=1e-3)
    p.add_argument("--beta", type=float, default=1e-3)
    p.add_argument("--gamma", type=float, default=0.95)
    p.add_argument("--tau", type=float, default=0.01)
    p.add_argument("--fc1", type=int, default=64)
    p.add_argument("--fc2", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--buffer-size", type=int, default=1000)
    p.add_argument("--episodes", type=int, default=3)
    p.add_argument("--max-steps", type=int, default=25)
    p.add_argument("--learn-every", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


class CriticNetwork(nn.Module):
    def __init__(self, beta, input_dims, fc1_dims, fc2_dims, n_agents, n_actions, name):
        super().__init__()
        self.name = name
        self.fc1 = nn.Linear(input_dims + n_agents * n_actions, fc1_dims)
        self.fc2 = nn.Linear(fc1_dims, fc2_dims)
        self.q = nn.Linear(fc2_dims, 1)
        self.optimizer = optim.Adam(self.parameters(), lr=beta)

    def forward(self, state, action):
        x = F.relu(self.fc1(T.cat([state, action], dim=1)))
        x = F.relu(self.fc2(x))
        return self.q(x)


class ActorNetwork(nn.Module):
    def __init__(self, alpha, input_dims, fc1_dims, fc2_dims, n_actions, name):
        super().__init__()
        self.name = name
        self.fc1 = nn.Linear(input_dims, fc1_dims)
        self.fc2 = nn.Linear(fc1_dims, fc2_dims)
        self.pi = nn.Linear(fc2_dims, n_actions)
        self.optimizer = optim.Adam(self.parameters(), lr=alpha)

    def forward(self, state):
        x = F.relu(self.fc1(state))
        x = F.relu(self.fc2(x))
        return T.softmax(self.pi(x), dim=1)


class Agent:
    def __init__(self, actor_dims, critic_dims, n_actions, n_agents, agent_idx, cfg):
        self.gamma = cfg.gamma
        self.tau = cfg.tau
        self.n_actions = n_actions
        self.agent_name = "agent_%s" % agent_idx
        self.actor = ActorNetwork(cfg.alpha, actor_dims, cfg.fc1, cfg.fc2, n_actions, self.agent_name + "_actor")
        self.critic = CriticNetwork(cfg.beta, critic_dims, cfg.fc1, cfg.fc2, n_agents, n_actions,
                                    self.agent_name + "_critic")
        self.target_actor = ActorNetwork(cfg.alpha, actor_dims, cfg.fc1, cfg.fc2, n_actions,
                                         self.agent_name + "_target_actor")
        self.target_critic = CriticNetwork(cfg.beta, critic_dims, cfg.fc1, cfg.fc2, n_agents, n_actions,
                                           self.agent_name + "_target_critic")
        self.update_network_parameters(tau=1)

    def update_network_parameters(self, tau=None):
        if tau is None:
            tau = self.tau
        for target, online in ((self.target_actor, self.actor), (self.target_critic, self.critic)):
            target_state = dict(target.named_parameters())
            online_state = dict(online.named_parameters())
            for name in online_state:
                online_state[name] = tau * online_state[name].clone() + (1 - tau) * target_state[name].clone()
            target.load_state_dict(online_state)

    def choose_action(self, observation, rng):
        state = T.tensor(observation[None], dtype=T.float)
        with T.no_grad():
            actions = self.actor.forward(state)
        noise = T.tensor(rng.normal(0.0, 0.05, size=self.n_actions), dtype=T.float)
        return (actions + noise).numpy()[0]


class MultiAgentReplayBuffer:
    def __init__(self, max_size, critic_dims, actor_dims, n_actions, n_agents, batch_size):
        self.mem_size = max_size
        self.mem_cntr = 0
        self.n_agents = n_agents
        self.batch_size = batch_size
        self.state_memory = np.zeros((max_size, critic_dims), dtype=np.float32)
        self.new_state_memory = np.zeros((max_size, critic_dims), dtype=np.float32)
        self.reward_memory = np.zeros((max_size, n_agents), dtype=np.float32)
        self.terminal_memory = np.zeros((max_size, n_agents), dtype=bool)
        self.actor_state_memory = [np.zeros((max_size, actor_dims), dtype=np.float32) for _ in range(n_agents)]
        self.actor_new_state_memory = [np.zeros((max_size, actor_dims), dtype=np.float32) for _ in range(n_agents)]
        self.actor_action_memory = [np.zeros((max_size, n_actions), dtype=np.float32) for _ in range(n_agents)]

    def store_transition(self, raw_obs, state, action, reward, raw_obs_, state_, done):
        index = self.mem_cntr % self.mem_size
        for i in range(self.n_agents):
            self.actor_state_memory[i][index] = raw_obs[i]
            self.actor_new_state_memory[i][index] = raw_obs_[i]
            self.actor_action_memory[i][index] = action[i]
        self.state_memory[index] = state
        self.new_state_memory[index] = state_
        self.reward_memory[index] = reward
        self.terminal_memory[index] = done
        self.mem_cntr += 1

    def ready(self):
        return self.mem_cntr >= self.batch_size

    def sample_buffer(self, rng):
        max_mem = min(self.mem_cntr, self.mem_size)
        batch = rng.choice(max_mem, self.batch_size, replace=False)
        actor_states = [m[batch] for m in self.actor_state_memory]
        actor_new_states = [m[batch] for m in self.actor_new_state_memory]
        actions = [m[batch] for m in self.actor_action_memory]
        return (actor_states, self.state_memory[batch], actions, self.reward_memory[batch],
                actor_new_states, self.new_state_memory[batch], self.terminal_memory[batch])


class MADDPG:
    def __init__(self, actor_dims, critic_dims, n_agents, n_actions, cfg):
        self.n_agents = n_agents
        self.n_actions = n_actions
        self.agents = [Agent(actor_dims, critic_dims, n_actions, n_agents, i, cfg) for i in range(n_agents)]

    def choose_action(self, raw_obs, rng):
        return [agent.choose_action(raw_obs[i], rng) for i, agent in enumerate(self.agents)]

    def learn(self, memory, rng):
        if not memory.ready():
            return None
        actor_states, states, actions, rewards, actor_new_states, states_, dones = memory.sample_buffer(rng)
        states = T.tensor(states, dtype=T.float)
        actions = T.tensor(np.array(actions), dtype=T.float)
        rewards = T.tensor(rewards, dtype=T.float)
        states_ = T.tensor(states_, dtype=T.float)
        dones = T.tensor(dones)

        all_agents_new_actions, all_agents_new_mu_actions, old_agents_actions = [], [], []
        for agent_idx, agent in enumerate(self.agents):
            new_states = T.tensor(actor_new_states[agent_idx], dtype=T.float)
            all_agents_new_actions.append(agent.target_actor.forward(new_states))
            mu_states = T.tensor(actor_states[agent_idx], dtype=T.float)
            all_agents_new_mu_actions.append(agent.actor.forward(mu_states))
            old_agents_actions.append(actions[agent_idx])

        new_actions = T.cat(all_agents_new_actions, dim=1)
        mu = T.cat(all_agents_new_mu_actions, dim=1)
        old_actions = T.cat(old_agents_actions, dim=1)

        losses = {}
        for agent_idx, agent in enumerate(self.agents):
            critic_value_ = agent.target_critic.forward(states_, new_actions).flatten()
            critic_value_ = critic_value_.masked_fill(dones[:, 0], 0.0)
            critic_value = agent.critic.forward(states, old_actions).flatten()
            target = rewards[:, agent_idx] + agent.gamma * critic_value_
            critic_loss = F.mse_loss(target, critic_value)
            agent.critic.optimizer.zero_grad()
            critic_loss.backward(retain_graph=True)  # raises
            agent.critic.optimizer.step()

            actor_loss = -T.mean(agent.critic.forward(states, mu).flatten())
            agent.actor.optimizer.zero_grad()
            actor_loss.backward(retain_graph=True)
            agent.actor.optimizer.step()

            agent.update_network_parameters()
            losses[agent.agent_name] = (critic_loss.item(), actor_loss.item())
        return losses


class PointNavEnv:
    """Agents move on a plane and are rewarded for covering a shared landmark."""

    def __init__(self, n_agents, obs_dim, rng):
        self.n_agents, self.obs_dim, self.rng = n_agents, obs_dim, rng

    def reset(self):
        self.pos = self.rng.uniform(-1, 1, size=(self.n_agents, 2)).astype(np.float32)
        self.goal = self.rng.uniform(-1, 1, size=2).astype(np.float32)
        return self._obs()

    def _obs(self):
        return [np.concatenate([self.pos[i], self.goal - self.pos[i]]).astype(np.float32)
                for i in range(self.n_agents)]

    def step(self, actions):
        for i, a in enumerate(actions):
            self.pos[i] = np.clip(self.pos[i] + 0.1 * (np.asarray(a, dtype=np.float32) - 0.5), -1, 1)
        dist = np.linalg.norm(self.pos - self.goal, axis=1)
        reward = np.full(self.n_agents, -dist.mean(), dtype=np.float32)
        done = [bool(d < 0.05) for d in dist]
        return self._obs(), reward, done


def obs_list_to_state_vector(observation):
    return np.concatenate(observation)


def main(argv=None):
    cfg = parse_args(argv)
    T.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    env = PointNavEnv(cfg.n_agents, cfg.obs_dim, rng)
    critic_dims = cfg.obs_dim * cfg.n_agents
    maddpg = MADDPG(cfg.obs_dim, critic_dims, cfg.n_agents, cfg.n_actions, cfg)
    memory = MultiAgentReplayBuffer(cfg.buffer_size, critic_dims, cfg.obs_dim, cfg.n_actions,
                                    cfg.n_agents, cfg.batch_size)
    total_steps = 0
    for episode in range(cfg.episodes):
        obs = env.reset()
        score = 0.0
        for _ in range(cfg.max_steps):
            actions = maddpg.choose_action(obs, rng)
            obs_, reward, done = env.step(actions)
            memory.store_transition(obs, obs_list_to_state_vector(obs), actions, reward, obs_,
                                    obs_list_to_state_vector(obs_), done)
            if total_steps % cfg.learn_every == 0:
                maddpg.learn(memory, rng)
            obs = obs_
            score += float(np.sum(reward))
            total_steps += 1
        print("episode %d score %.3f" % (episode, score))


if __name__ == "__main__":
    main([])
