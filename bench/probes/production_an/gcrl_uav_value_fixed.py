# expect: clean
# source: https://github.com/BIT-MCS/GCRL-min-AoI/issues/3
"""Graph-based model-predictive RL for UAV crowdsensing (GCRL-min-AoI layout).

A UAV (robot) collects data from ground points of interest (PoIs).  States are
(robot_state, poi_states); a relational graph model (RGL) embeds them, a value
estimator scores them, and a state predictor forecasts the next PoI states.
The MPRLTrainer fits both from a replay memory with a deep-copied target value
network; the Explorer rolls out a one-step-lookahead policy in a synthetic
environment.
"""
import copy
import itertools
import logging
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
from torch.nn import Parameter
from torch.nn.functional import relu, softmax
from torch.utils.data import DataLoader, Dataset

config = SimpleNamespace(
    gcn=SimpleNamespace(similarity_function="embedded_gaussian", num_layer=2, X_dim=32,
                        layerwise_graph=False, skip_connection=True, wr_dims=[64, 32],
                        wh_dims=[64, 32], final_state_dim=32),
    value_network_dims=[32, 100, 100, 1],
    motion_predictor_dims=[64, 3],
    train=SimpleNamespace(rl_learning_rate=1e-3, batch_size=16, train_batches=3, train_episodes=3,
                          target_update_interval=2, capacity=500, optimizer="Adam"),
    env=SimpleNamespace(poi_num=12, robot_dim=4, poi_dim=3, time_limit=8, seed=0),
)


def mlp(input_dim, mlp_dims, last_relu=False):
    layers = []
    mlp_dims = [input_dim] + mlp_dims
    for i in range(len(mlp_dims) - 1):
        layers.append(nn.Linear(mlp_dims[i], mlp_dims[i + 1]))
        if i != len(mlp_dims) - 2 or last_relu:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class RGL(nn.Module):
    def __init__(self, config, robot_state_dim, human_state_dim):
        super().__init__()
        self.similarity_function = config.gcn.similarity_function
        self.num_layer = config.gcn.num_layer
        self.X_dim = config.gcn.X_dim
        self.layerwise_graph = config.gcn.layerwise_graph
        self.skip_connection = config.gcn.skip_connection
        self.w_r = mlp(robot_state_dim, config.gcn.wr_dims, last_relu=True)
        self.w_h = mlp(human_state_dim, config.gcn.wh_dims, last_relu=True)
        if self.similarity_function == "embedded_gaussian":
            self.w_a = Parameter(torch.randn(self.X_dim, self.X_dim))
        elif self.similarity_function == "concatenation":
            self.w_a = mlp(2 * self.X_dim, [2 * self.X_dim, 1], last_relu=True)
        embedding_dim = self.X_dim
        self.Ws = torch.nn.ParameterList()
        for i in range(self.num_layer):
            if i == self.num_layer - 1:
                self.Ws.append(Parameter(torch.randn(embedding_dim, config.gcn.final_state_dim) * 0.1))
            else:
                self.Ws.append(Parameter(torch.randn(self.X_dim, embedding_dim) * 0.1))
        self.A = None

    def compute_similarity_matrix(self, X):
        if self.similarity_function == "embedded_gaussian":
            A = torch.matmul(torch.matmul(X, self.w_a), X.permute(0, 2, 1))
            normalized_A = softmax(A, dim=2)
        elif self.similarity_function == "gaussian":
            normalized_A = softmax(torch.matmul(X, X.permute(0, 2, 1)), dim=2)
        elif self.similarity_function == "concatenation":
            indices = [pair for pair in itertools.product(list(range(X.size(1))), repeat=2)]
            selected = torch.index_select(X, dim=1, index=torch.LongTensor(indices).reshape(-1))
            pairwise = selected.reshape((-1, X.size(1) * X.size(1), X.size(2) * 2))
            normalized_A = self.w_a(pairwise).reshape(-1, X.size(1), X.size(1))
        else:
            raise NotImplementedError
        return normalized_A

    def forward(self, state):
        robot_states, human_states = state
        X = torch.cat([self.w_r(robot_states), self.w_h(human_states)], dim=1)
        if not self.layerwise_graph:
            normalized_A = self.compute_similarity_matrix(X)
            self.A = normalized_A[0, :, :].data.cpu().numpy()
        next_H = H = X
        for i in range(self.num_layer):
            if self.layerwise_graph:
                A = self.compute_similarity_matrix(H)
                next_H = relu(torch.matmul(torch.matmul(A, H), self.Ws[i]))
            else:
                next_H = relu(torch.matmul(torch.matmul(normalized_A, H), self.Ws[i]))
            if self.skip_connection:
                next_H = next_H + H
            H = next_H
        return next_H


class ValueEstimator(nn.Module):
    def __init__(self, config, graph_model):
        super().__init__()
        self.graph_model = graph_model
        self.value_network = mlp(config.gcn.X_dim, config.value_network_dims[1:])

    def forward(self, state):
        state_embedding = self.graph_model(state)[:, 0, :]
        return self.value_network(state_embedding)


class StatePredictor(nn.Module):
    def __init__(self, config, graph_model):
        super().__init__()
        self.trainable = True
        self.graph_model = graph_model
        self.human_motion_predictor = mlp(config.gcn.X_dim, config.motion_predictor_dims)

    def forward(self, state, action, detach=False):
        state_embedding = self.graph_model(state)
        if detach:
            state_embedding = state_embedding.detach()
        return None, self.human_motion_predictor(state_embedding)[:, 1:, :]


class ReplayMemory(Dataset):
    def __init__(self, capacity):
        self.capacity, self.memory, self.position = capacity, [], 0

    def push(self, item):
        if len(self.memory) < self.capacity:
            self.memory.append(item)
        else:
            self.memory[self.position] = item
        self.position = (self.position + 1) % self.capacity

    def __getitem__(self, idx):
        return self.memory[idx]

    def __len__(self):
        return len(self.memory)


class MPRLTrainer:
    def __init__(self, value_estimator, state_predictor, memory, batch_size, optimizer_str):
        self.value_estimator = value_estimator
        self.state_predictor = state_predictor
        self.criterion = nn.MSELoss()
        self.memory = memory
        self.data_loader = None
        self.batch_size = batch_size
        self.optimizer_str = optimizer_str
        self.target_model = None
        self.gamma = 0.9

    def update_target_model(self, target_model):
        self.target_model = copy.deepcopy(target_model)

    def set_learning_rate(self, learning_rate):
        self.v_optimizer = torch.optim.Adam(self.value_estimator.parameters(), lr=learning_rate)
        self.s_optimizer = torch.optim.Adam(self.state_predictor.parameters(), lr=learning_rate)

    def optimize_batch(self, num_batches, episode):
        if self.data_loader is None:
            self.data_loader = DataLoader(self.memory, self.batch_size, shuffle=True)
        v_losses = s_losses = 0
        batch_count = 0
        for data in self.data_loader:
            robot_states, human_states, _, rewards, next_robot_states, next_human_states = data
            self.v_optimizer.zero_grad()
            outputs = self.value_estimator((robot_states, human_states))
            target_values = rewards + self.gamma * self.target_model((next_robot_states, next_human_states))
            loss = self.criterion(outputs, target_values)
            loss.backward()
            self.v_optimizer.step()
            v_losses += loss.data.item()

            self.s_optimizer.zero_grad()
            _, next_human_states_est = self.state_predictor((robot_states, human_states), None, detach=True)
            loss = self.criterion(next_human_states_est, next_human_states)
            loss.backward()
            self.s_optimizer.step()
            s_losses += loss.data.item()
            batch_count += 1
            if batch_count > num_batches:
                break
        logging.info("episode %d average loss: %.2E, %.2E", episode, v_losses / num_batches, s_losses / num_batches)
        return v_losses / num_batches, s_losses / num_batches


class CrowdSimUAV:
    """UAV moves on the unit square; PoIs accumulate age-of-information until visited."""

    actions = [(0.0, 0.0), (0.1, 0.0), (-0.1, 0.0), (0.0, 0.1), (0.0, -0.1)]

    def __init__(self, cfg):
        self.cfg, self.rng = cfg, np.random.RandomState(cfg.seed)

    def reset(self):
        self.uav = np.array([0.5, 0.5])
        self.pois = self.rng.uniform(0, 1, size=(self.cfg.poi_num, 2))
        self.aoi = np.zeros(self.cfg.poi_num)
        self.t = 0
        return self.state()

    def state(self):
        robot = torch.tensor([[*self.uav, self.t / self.cfg.time_limit, 1.0]], dtype=torch.float32)
        pois = torch.tensor(np.c_[self.pois, self.aoi / self.cfg.time_limit], dtype=torch.float32)
        return robot, pois

    def step(self, a):
        self.uav = np.clip(self.uav + np.array(self.actions[a]), 0, 1)
        self.t += 1
        covered = np.linalg.norm(self.pois - self.uav, axis=1) < 0.2
        self.aoi = np.where(covered, 0.0, self.aoi + 1.0)
        reward = -self.aoi.mean() / self.cfg.time_limit
        return self.state(), reward, self.t >= self.cfg.time_limit


class Explorer:
    def __init__(self, env, value_estimator, memory, gamma=0.9):
        self.env, self.value_estimator, self.memory, self.gamma = env, value_estimator, memory, gamma

    def select_action(self, env):
        best, best_value = 0, -float("inf")
        for a in range(len(env.actions)):
            saved = (env.uav.copy(), env.aoi.copy(), env.t)
            (r_s, h_s), reward, _ = env.step(a)
            env.uav, env.aoi, env.t = saved
            with torch.no_grad():
                value = reward + self.gamma * self.value_estimator((r_s[None], h_s[None])).item()
            if value > best_value:
                best, best_value = a, value
        return best

    def run_episode(self, epsilon):
        robot, pois = self.env.reset()
        done, total = False, 0.0
        while not done:
            a = np.random.randint(5) if np.random.rand() < epsilon else self.select_action(self.env)
            (n_robot, n_pois), reward, done = self.env.step(a)
            self.memory.push((robot, pois, torch.zeros(1), torch.tensor([reward], dtype=torch.float32),
                              n_robot, n_pois))
            robot, pois, total = n_robot, n_pois, total + reward
        return total


def main():
    torch.manual_seed(0)
    np.random.seed(0)
    env_cfg, train_cfg = config.env, config.train
    graph_model = RGL(config, env_cfg.robot_dim, env_cfg.poi_dim)
    value_estimator = ValueEstimator(config, graph_model)
    state_predictor = StatePredictor(config, graph_model)
    memory = ReplayMemory(train_cfg.capacity)
    trainer = MPRLTrainer(value_estimator, state_predictor, memory, train_cfg.batch_size, train_cfg.optimizer)
    trainer.set_learning_rate(train_cfg.rl_learning_rate)
    trainer.update_target_model(value_estimator)
    explorer = Explorer(CrowdSimUAV(env_cfg), value_estimator, memory)
    for _ in range(3):
        explorer.run_episode(epsilon=1.0)
    for episode in range(train_cfg.train_episodes):
        ret = explorer.run_episode(epsilon=0.3)
        v_loss, s_loss = trainer.optimize_batch(train_cfg.train_batches, episode)
        if episode % train_cfg.target_update_interval == 0:
            trainer.update_target_model(value_estimator)
        print(f"episode {episode}: return {ret:.3f} v_loss {v_loss:.4f} s_loss {s_loss:.4f}")


if __name__ == "__main__":
    main()
