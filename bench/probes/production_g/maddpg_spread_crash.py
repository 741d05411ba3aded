# expect: inplace_version
# source: https://github.com/starry-sky6688/MADDPG/issues/27
"""MADDPG on a cooperative navigation ("simple spread") task.

N agents move in the plane and are rewarded for covering N landmarks while
avoiding collisions.  Each agent has a decentralised actor and a centralised
critic that sees all observations and actions.  Target networks are soft
updated.
"""
import argparse
import copy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args():
    parser = argparse.ArgumentParser("MADDPG simple spread")
    parser.add_argument("--n-agents", type=int, default=3)
    parser.add_argument("--max-episode-len", type=int, default=25)
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--lr-actor", type=float, default=1e-3)
    parser.add_argument("--lr-critic", type=float, default=1e-3)
    parser.add_argument("--gamma", type=float, default=0.95)
    parser.add_argument("--tau", type=float, default=0.01)
    parser.add_argument("--buffer-size", type=int, default=5000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--learn-start", type=int, default=64)
    parser.add_argument("--noise-rate", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args([])
    args.obs_shape = [4 + 2 * args.n_agents] * args.n_agents
    args.action_shape = [2] * args.n_agents
    return args


class SpreadEnv:
    def __init__(self, n_agents, rng):
        self.n = n_agents
        self.rng = rng

    def reset(self):
        self.pos = self.rng.uniform(-1, 1, (self.n, 2))
        self.vel = np.zeros((self.n, 2))
        self.landmarks = self.rng.uniform(-1, 1, (self.n, 2))
        return self._obs()

    def _obs(self):
        obs = []
        for i in range(self.n):
            rel = (self.landmarks - self.pos[i]).ravel()
            obs.append(np.concatenate([self.pos[i], self.vel[i], rel]).astype(np.float32))
        return obs

    def step(self, actions):
        acts = np.clip(np.stack(actions), -1, 1)
        self.vel = 0.75 * self.vel + 0.1 * acts
        self.pos = np.clip(self.pos + self.vel, -1.5, 1.5)
        dists = np.linalg.norm(self.landmarks[:, None] - self.pos[None], axis=-1)
        reward = -dists.min(axis=1).sum()
        pair = np.linalg.norm(self.pos[:, None] - self.pos[None], axis=-1)
        reward -= 0.5 * ((pair < 0.1).sum() - self.n) / 2
        return self._obs(), [float(reward)] * self.n


class Actor(nn.Module):
    def __init__(self, args, agent_id):
        super().__init__()
        self.fc1 = nn.Linear(args.obs_shape[agent_id], 64)
        self.fc2 = nn.Linear(64, 64)
        self.action_out = nn.Linear(64, args.action_shape[agent_id])

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return torch.tanh(self.action_out(x))


class Critic(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.fc1 = nn.Linear(sum(args.obs_shape) + sum(args.action_shape), 64)
        self.fc2 = nn.Linear(64, 64)
        self.q_out = nn.Linear(64, 1)

    def forward(self, state, action):
        x = torch.cat(list(state) + list(action), dim=1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.q_out(x)


class ReplayBuffer:
    def __init__(self, args):
        self.size, self.args = args.buffer_size, args
        self.current_size, self.ptr = 0, 0
        self.buffer = {}
        for i in range(args.n_agents):
            self.buffer[f"o_{i}"] = np.empty([self.size, args.obs_shape[i]], np.float32)
            self.buffer[f"u_{i}"] = np.empty([self.size, args.action_shape[i]], np.float32)
            self.buffer[f"r_{i}"] = np.empty([self.size], np.float32)
            self.buffer[f"o_next_{i}"] = np.empty([self.size, args.obs_shape[i]], np.float32)

    def store(self, o, u, r, o_next):
        for i in range(self.args.n_agents):
            self.buffer[f"o_{i}"][self.ptr] = o[i]
            self.buffer[f"u_{i}"][self.ptr] = u[i]
            self.buffer[f"r_{i}"][self.ptr] = r[i]
            self.buffer[f"o_next_{i}"][self.ptr] = o_next[i]
        self.ptr = (self.ptr + 1) % self.size
        self.current_size = min(self.current_size + 1, self.size)

    def sample(self, batch_size, rng):
        idx = rng.integers(0, self.current_size, batch_size)
        return {k: v[idx] for k, v in self.buffer.items()}


class MADDPG:
    def __init__(self, args, agent_id):
        self.args, self.agent_id, self.train_step = args, agent_id, 0
        self.actor_network = Actor(args, agent_id)
        self.critic_network = Critic(args)
        self.actor_target_network = copy.deepcopy(self.actor_network)
        self.critic_target_network = copy.deepcopy(self.critic_network)
        self.actor_optim = torch.optim.Adam(self.actor_network.parameters(), lr=args.lr_actor)
        self.critic_optim = torch.optim.Adam(self.critic_network.parameters(), lr=args.lr_critic)

    def _soft_update_target_network(self):
        for net, target in ((self.actor_network, self.actor_target_network),
                            (self.critic_network, self.critic_target_network)):
            for tp, p in zip(target.parameters(), net.parameters()):
                tp.data.copy_((1 - self.args.tau) * tp.data + self.args.tau * p.data)

    def train(self, transitions, other_agents):
        transitions = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in transitions.items()}
        r = transitions[f"r_{self.agent_id}"]
        o = [transitions[f"o_{i}"] for i in range(self.args.n_agents)]
        u = [transitions[f"u_{i}"] for i in range(self.args.n_agents)]
        o_next = [transitions[f"o_next_{i}"] for i in range(self.args.n_agents)]

        u_next = []
        with torch.no_grad():
            index = 0
            for agent_id in range(self.args.n_agents):
                if agent_id == self.agent_id:
                    u_next.append(self.actor_target_network(o_next[agent_id]))
                else:
                    u_next.append(other_agents[index].policy.actor_target_network(o_next[agent_id]))
                    index += 1
            q_next = self.critic_target_network(o_next, u_next)
            target_q = r.unsqueeze(1) + self.args.gamma * q_next

        q_value = self.critic_network(o, u)
        critic_loss = (target_q - q_value).pow(2).mean()

        # re-select this agent's action, keep the other agents' actions from the batch
        u = list(u)
        u[self.agent_id] = self.actor_network(o[self.agent_id])
        actor_loss = -self.critic_network(o, u).mean()

        # critic first, then actor (as in the paper)
        self.critic_optim.zero_grad()
        critic_loss.backward()
        self.critic_optim.step()

        self.actor_optim.zero_grad()
        actor_loss.backward()  # raises
        self.actor_optim.step()

        self._soft_update_target_network()
        self.train_step += 1
        return critic_loss.item(), actor_loss.item()


class Agent:
    def __init__(self, agent_id, args):
        self.args, self.agent_id = args, agent_id
        self.policy = MADDPG(args, agent_id)

    def select_action(self, o, noise_rate, rng):
        with torch.no_grad():
            u = self.policy.actor_network(torch.as_tensor(o)[None])[0].numpy()
        u = u + noise_rate * rng.standard_normal(u.shape)
        return np.clip(u, -1, 1)

    def learn(self, transitions, other_agents):
        return self.policy.train(transitions, other_agents)


def run(args):
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)
    env = SpreadEnv(args.n_agents, rng)
    agents = [Agent(i, args) for i in range(args.n_agents)]
    buffer = ReplayBuffer(args)
    returns = []
    for ep in range(args.episodes):
        s = env.reset()
        ep_ret = 0.0
        for t in range(args.max_episode_len):
            u = [agent.select_action(s[i], args.noise_rate, rng) for i, agent in enumerate(agents)]
            s_next, r = env.step(u)
            buffer.store(s, u, r, s_next)
            s = s_next
            ep_ret += r[0]
            if buffer.current_size >= args.learn_start:
                transitions = buffer.sample(args.batch_size, rng)
                for agent in agents:
                    others = [a for a in agents if a is not agent]
                    agent.learn(transitions, others)
        returns.append(ep_ret)
        print(f"episode {ep}: return {ep_ret:.2f}")
    return returns


if __name__ == "__main__":
    run(get_args())
