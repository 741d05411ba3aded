# expect: clean
# source: https://github.com/FazelYU/Adaptive-Navigation/issues/41
"""Adaptive vehicle routing with one DQN agent per intersection.

Each intersection of a (synthetic) road network is an agent with its own Q-network; the
state of a vehicle waiting at an intersection is the GAT embedding of that intersection
concatenated with a one-hot of the vehicle's destination.  The GAT that embeds the road
network is trained end to end together with the agents' Q-networks.  Transitions go into
a per-agent replay buffer; every few environment steps every agent with enough
experience runs a learning iteration.
"""
import random
from collections import Counter, deque, namedtuple
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

torch.manual_seed(0)
np.random.seed(0)
random.seed(0)

Experience = namedtuple("Experience", ["node", "dest", "action", "reward", "next_node", "done"])


class GATLayer(nn.Module):
    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.fc = nn.Linear(in_dim, out_dim, bias=False)
        self.attn = nn.Parameter(torch.randn(2 * out_dim) * 0.1)

    def forward(self, x, adj):
        h = self.fc(x)
        n = h.size(0)
        pair = torch.cat([h.unsqueeze(1).expand(n, n, -1), h.unsqueeze(0).expand(n, n, -1)], dim=-1)
        e = F.leaky_relu((pair * self.attn).sum(-1), 0.2)
        e = e.masked_fill(adj == 0, float("-inf"))
        alpha = torch.softmax(e, dim=1)
        return F.elu(alpha @ h)


class GAT(nn.Module):
    def __init__(self, in_dim, hidden, out_dim):
        super().__init__()
        self.layers = nn.ModuleList([GATLayer(in_dim, hidden), GATLayer(hidden, out_dim)])

    def forward(self, x, adj):
        for layer in self.layers:
            x = layer(x, adj)
        return x


class QNetwork(nn.Module):
    def __init__(self, input_dim, n_actions, hidden=32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(input_dim, hidden), nn.ReLU(), nn.Linear(hidden, n_actions))

    def forward(self, x):
        return self.net(x)


class Replay_Buffer:
    def __init__(self, buffer_size, batch_size, seed):
        self.memory = deque(maxlen=buffer_size)
        self.batch_size = batch_size
        self.rng = random.Random(seed)

    def add_experience(self, *args):
        self.memory.append(Experience(*args))

    def sample(self):
        batch = self.rng.sample(list(self.memory), k=self.batch_size)
        nodes = torch.tensor([e.node for e in batch])
        dests = torch.tensor([e.dest for e in batch])
        actions = torch.tensor([[e.action] for e in batch])
        rewards = torch.tensor([[e.reward] for e in batch], dtype=torch.float32)
        next_nodes = torch.tensor([e.next_node for e in batch])
        dones = torch.tensor([[float(e.done)] for e in batch])
        return nodes, dests, actions, rewards, next_nodes, dones

    def __len__(self):
        return len(self.memory)


class Epsilon_Greedy_Exploration:
    def __init__(self, config):
        self.epsilon = config.hyperparameters["epsilon"]
        self.decay = config.hyperparameters["epsilon_decay"]

    def perturb_action_for_exploration_purposes(self, info):
        epsilon = self.epsilon * (self.decay ** info["episode_number"])
        if info["turn_off_exploration"] or random.random() > epsilon:
            return int(info["action_values"].argmax().item())
        return random.randint(0, info["action_values"].size(-1) - 1)


class Adaptive_Routing_Environment:
    """Grid road network; each intersection forwards vehicles to one of its neighbours."""

    def __init__(self, rows, cols, n_vehicles):
        self.n_nodes = rows * cols
        self.adj = torch.zeros(self.n_nodes, self.n_nodes)
        for r in range(rows):
            for c in range(cols):
                i = r * cols + c
                for dr, dc in ((0, 1), (1, 0), (0, -1), (-1, 0)):
                    rr, cc = r + dr, c + dc
                    if 0 <= rr < rows and 0 <= cc < cols:
                        self.adj[i, rr * cols + cc] = 1.0
        self.neighbours = [self.adj[i].nonzero().flatten().tolist() for i in range(self.n_nodes)]
        self.max_degree = max(len(n) for n in self.neighbours)
        self.node_features = torch.randn(self.n_nodes, 6)
        self.n_vehicles = n_vehicles

    def reset(self):
        self.vehicles = [[random.randrange(self.n_nodes), random.randrange(self.n_nodes), 0]
                         for _ in range(self.n_vehicles)]
        return [(v[0], v[1]) for v in self.vehicles]

    def step(self, actions):
        transitions = []
        for v, a in zip(self.vehicles, actions):
            node, dest, age = v
            nbrs = self.neighbours[node]
            nxt = nbrs[a % len(nbrs)]
            done = nxt == dest or age > 12
            reward = 1.0 if nxt == dest else -0.1
            transitions.append((node, dest, a, reward, nxt, done))
            v[0], v[2] = nxt, age + 1
            if done:
                v[0], v[1], v[2] = random.randrange(self.n_nodes), random.randrange(self.n_nodes), 0
        return transitions, [(v[0], v[1]) for v in self.vehicles]


class Base_Agent:
    def __init__(self, config):
        self.config = config
        self.hyperparameters = config.hyperparameters
        self.environment = config.environment
        self.episode_number = 0
        self.global_step_number = 0
        self.turn_off_exploration = False
        self.n_nodes = self.environment.n_nodes
        self.state_size = config.embed_dim + self.n_nodes
        self.gat = GAT(self.environment.node_features.size(1), 16, config.embed_dim)
        self.gat_optimizer = optim.Adam(self.gat.parameters(), lr=self.hyperparameters["learning_rate"])

    def create_agent_dic(self, input_dim):
        agent_dic = {}
        for node in range(self.n_nodes):
            nn_ = QNetwork(input_dim, self.environment.max_degree)
            agent_dic[node] = {
                "NN": nn_,
                "optimizer": optim.Adam(nn_.parameters(), lr=self.hyperparameters["learning_rate"]),
                "memory": Replay_Buffer(self.hyperparameters["buffer_size"], self.hyperparameters["batch_size"], node),
            }
        return agent_dic

    def embed_network(self):
        return self.gat(self.environment.node_features, self.environment.adj)

    def reset_game(self):
        self.states = self.environment.reset()
        self.network_state = self.embed_network()
        self.done = False

    def take_optimisation_step(self, agent_id, loss, clipping_norm=None):
        optimizer = self.agent_dic[agent_id]["optimizer"]
        optimizer.zero_grad()
        self.gat_optimizer.zero_grad()
        loss.backward(retain_graph=True)
        if clipping_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.agent_dic[agent_id]["NN"].parameters(), clipping_norm)
        optimizer.step()
        self.gat_optimizer.step()


class DQN(Base_Agent):
    agent_name = "DQN"

    def __init__(self, config):
        Base_Agent.__init__(self, config)
        self.agent_dic = self.create_agent_dic(input_dim=self.state_size)
        self.exploration_strategy = Epsilon_Greedy_Exploration(config)
        self.losses = []

    def build_states(self, nodes, dests):
        return torch.cat([self.network_state[nodes], F.one_hot(dests, self.n_nodes).float()], dim=-1)

    def pick_action(self):
        actions = []
        with torch.no_grad():
            for node, dest in self.states:
                state = self.build_states(torch.tensor([node]), torch.tensor([dest]))
                q_values = self.agent_dic[node]["NN"](state)
                actions.append(self.exploration_strategy.perturb_action_for_exploration_purposes(
                    {"action_values": q_values, "turn_off_exploration": self.turn_off_exploration,
                     "episode_number": self.episode_number}))
        return actions

    def step(self, max_steps):
        for _ in range(max_steps):
            actions = self.pick_action()
            transitions, self.states = self.environment.step(actions)
            for tr in transitions:
                self.agent_dic[tr[0]]["memory"].add_experience(*tr)
            self.global_step_number += len(transitions)
            if self.right_amount_of_steps_taken():
                for agent_id in self.agent_dic:
                    if self.enough_experiences_to_learn_from(agent_id):
                        for _ in range(self.hyperparameters["learning_iterations"]):
                            self.learn(agent_id)
        self.episode_number += 1

    def learn(self, agent_id):
        memory = self.agent_dic[agent_id]["memory"]
        nodes, dests, actions, rewards, next_nodes, dones = memory.sample()
        self.network_state = self.embed_network()
        loss = self.compute_loss(agent_id, nodes, dests, actions, rewards, next_nodes, dones)
        self.take_optimisation_step(agent_id, loss, self.hyperparameters["gradient_clipping_norm"])
        self.losses.append(loss.item())

    def compute_loss(self, agent_id, nodes, dests, actions, rewards, next_nodes, dones):
        with torch.no_grad():
            Q_targets = self.compute_q_targets(next_nodes, dests, rewards, dones)
        states = self.build_states(nodes, dests)
        Q_expected = self.agent_dic[agent_id]["NN"](states).gather(1, actions.long())
        return F.mse_loss(Q_expected, Q_targets)

    def compute_q_targets(self, next_nodes, dests, rewards, dones):
        next_states = self.build_states(next_nodes, dests)
        Q_next = torch.zeros(next_nodes.size(0), 1)
        for i, node in enumerate(next_nodes.tolist()):
            Q_next[i] = self.agent_dic[node]["NN"](next_states[i:i + 1]).max(1)[0]
        return rewards + self.hyperparameters["discount_rate"] * Q_next * (1 - dones)

    def right_amount_of_steps_taken(self):
        return self.global_step_number % self.hyperparameters["update_every_n_steps"] == 0

    def enough_experiences_to_learn_from(self, agent_id):
        return len(self.agent_dic[agent_id]["memory"]) >= self.hyperparameters["batch_size"]


class Trainer:
    def __init__(self, config, agent_class):
        self.config = config
        self.agent = agent_class(config)

    def run_games_for_agent(self):
        for episode in range(self.config.num_episodes):
            self.agent.reset_game()
            self.agent.step(self.config.max_episode_steps)
            recent = self.agent.losses[-20:]
            print("episode {} mean loss {:.4f}".format(episode, float(np.mean(recent)) if recent else float("nan")))
        return self.evaluate()

    def evaluate(self):
        self.agent.turn_off_exploration = True
        self.agent.reset_game()
        actions = self.agent.pick_action()
        self.agent.turn_off_exploration = False
        return Counter(actions)


def main():
    config = SimpleNamespace(
        environment=Adaptive_Routing_Environment(rows=3, cols=3, n_vehicles=12),
        embed_dim=8,
        num_episodes=2,
        max_episode_steps=12,
        hyperparameters={
            "learning_rate": 1e-3, "batch_size": 4, "buffer_size": 200, "epsilon": 0.5,
            "epsilon_decay": 0.9, "discount_rate": 0.95, "update_every_n_steps": 12,
            "learning_iterations": 1, "gradient_clipping_norm": 5.0,
        },
    )
    trainer = Trainer(config, DQN)
    print("greedy action counts:", trainer.run_games_for_agent())


if __name__ == "__main__":
    main()
