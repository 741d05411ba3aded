# expect: inplace_version
# source: https://github.com/LibCity/Bigscity-LibCity/issues/303
"""STSGCN traffic-flow forecaster in the style of LibCity.

A spatial-temporal synchronous graph convolution network (localized
spatial-temporal graph over 3 consecutive time slices, position embeddings,
stacked STSGCL layers, one output head per predicted step) trained with a
LibCity-like executor: config dict, standard scaler, huber loss, Adam with a
MultiStepLR scheduler, validation loop and a couple of callbacks.
Synthetic PEMS-like data, CPU only.
"""
import math
import time
from logging import getLogger, basicConfig, INFO

import numpy as np
import torch
import torch.nn as nn
from torch.nn.init import xavier_uniform_


class StandardScaler:
    def __init__(self, mean, std):
        self.mean = mean
        self.std = std

    def transform(self, data):
        return (data - self.mean) / self.std

    def inverse_transform(self, data):
        return data * self.std + self.mean


def huber_loss(preds, labels, delta=1.0):
    residual = torch.abs(preds - labels)
    condition = torch.le(residual, delta)
    small_res = 0.5 * torch.square(residual)
    large_res = delta * residual - 0.5 * delta * delta
    return torch.mean(torch.where(condition, small_res, large_res))


class PositionEmbedding(nn.Module):
    def __init__(self, input_length, num_of_vertices, embedding_size, temporal=True, spatial=True, config=None):
        super().__init__()
        self.temporal = temporal
        self.spatial = spatial
        self.temporal_emb = nn.Parameter(torch.zeros((1, input_length, 1, embedding_size)).to(config['device']))
        xavier_uniform_(self.temporal_emb)
        self.spatial_emb = nn.Parameter(torch.zeros((1, 1, num_of_vertices, embedding_size)).to(config['device']))
        xavier_uniform_(self.spatial_emb)

    def forward(self, data):
        if self.temporal:
            data += self.temporal_emb
        if self.spatial:
            data += self.spatial_emb
        return data


class GcnOperation(nn.Module):
    def __init__(self, num_of_filter, num_of_features, num_of_vertices, activation):
        super().__init__()
        assert activation in {'GLU', 'relu'}
        self.num_of_filter = num_of_filter
        self.activation = activation
        if activation == "GLU":
            self.layer = nn.Linear(num_of_features, 2 * num_of_filter)
        else:
            self.layer = nn.Linear(num_of_features, num_of_filter)

    def forward(self, data, adj):
        data = torch.matmul(adj, data)
        if self.activation == "GLU":
            data = self.layer(data)
            lhs, rhs = data.split(self.num_of_filter, -1)
            data = lhs * torch.sigmoid(rhs)
        else:
            data = torch.relu(self.layer(data))
        return data


class Stsgcm(nn.Module):
    def __init__(self, filters, num_of_features, num_of_vertices, activation):
        super().__init__()
        self.num_of_vertices = num_of_vertices
        self.layers = nn.ModuleList()
        for f in filters:
            self.layers.append(GcnOperation(f, num_of_features, num_of_vertices, activation))
            num_of_features = f

    def forward(self, data, adj):
        need_concat = []
        for layer in self.layers:
            data = layer(data, adj)
            need_concat.append(torch.transpose(data, 1, 0))
        need_concat = [torch.unsqueeze(i[self.num_of_vertices:2 * self.num_of_vertices], dim=0)
                       for i in need_concat]
        return torch.max(torch.cat(need_concat, dim=0), dim=0)[0]


class STSGCL(nn.Module):
    def __init__(self, t, num_of_vertices, num_of_features, filters, activation,
                 temporal_emb=True, spatial_emb=True, config=None):
        super().__init__()
        self.T = t
        self.num_of_vertices = num_of_vertices
        self.num_of_features = num_of_features
        self.position_embedding = PositionEmbedding(t, num_of_vertices, num_of_features,
                                                    temporal_emb, spatial_emb, config)
        self.gcms = nn.ModuleList([Stsgcm(filters, num_of_features, num_of_vertices, activation)
                                   for _ in range(self.T - 2)])

    def forward(self, data, adj):
        data = self.position_embedding(data)
        need_concat = []
        for i in range(self.T - 2):
            t = data[:, i:i + 3, :, :]
            t = torch.reshape(t, (-1, 3 * self.num_of_vertices, self.num_of_features))
            t = self.gcms[i](t, adj)
            t = torch.transpose(t, 0, 1)
            need_concat.append(torch.unsqueeze(t, dim=1))
        return torch.cat(need_concat, dim=1)


class OutputLayer(nn.Module):
    def __init__(self, num_of_vertices, input_length, num_of_features, num_of_filters=32, predict_length=1,
                 output_dim=1):
        super().__init__()
        self.num_of_vertices = num_of_vertices
        self.input_length = input_length
        self.num_of_features = num_of_features
        self.predict_length = predict_length
        self.output_dim = output_dim
        self.hidden_layer = nn.Linear(input_length * num_of_features, num_of_filters)
        self.ouput_layer = nn.Linear(num_of_filters, predict_length * output_dim)

    def forward(self, data):
        data = torch.transpose(data, 1, 2)
        data = torch.reshape(data, (-1, self.num_of_vertices, self.input_length * self.num_of_features))
        data = torch.relu(self.hidden_layer(data))
        data = self.ouput_layer(data).reshape((-1, self.num_of_vertices, self.predict_length, self.output_dim))
        return data.permute(0, 2, 1, 3)


def construct_adj(a, steps):
    n = len(a)
    adj = np.zeros([n * steps] * 2)
    for i in range(steps):
        adj[i * n:(i + 1) * n, i * n:(i + 1) * n] = a
    for i in range(n):
        for k in range(steps - 1):
            adj[k * n + i, (k + 1) * n + i] = 1
            adj[(k + 1) * n + i, k * n + i] = 1
    for i in range(len(adj)):
        adj[i, i] = 1
    return adj


class STSGCN(nn.Module):
    def __init__(self, config, data_feature):
        super().__init__()
        self._scaler = data_feature['scaler']
        self.num_of_vertices = data_feature['num_nodes']
        self.feature_dim = data_feature['feature_dim']
        self.output_dim = data_feature['output_dim']
        self.device = config.get('device', torch.device('cpu'))
        self.input_length = config.get('input_window', 12)
        self.predict_length = config.get('output_window', 3)
        activation = config.get('act_type', 'GLU')

        adj = construct_adj(data_feature['adj_mx'], 3)
        self.adj = torch.tensor(adj, dtype=torch.float32).to(self.device)

        self.embedding_dim = self.feature_dim
        self.num_of_features = self.feature_dim
        first = config.get('first_layer_embedding_size', 16)
        self.first_layer_embedding = nn.Linear(self.num_of_features, first) if first else None
        if first:
            self.num_of_features = first

        self.stsgcl_layers = nn.ModuleList()
        for filters in config.get('filters', [[16, 16, 16], [16, 16, 16]]):
            self.stsgcl_layers.append(STSGCL(self.input_length, self.num_of_vertices, self.num_of_features,
                                             filters, activation, config.get('temporal_emb', True),
                                             config.get('spatial_emb', True), config))
            self.input_length -= 2
            self.num_of_features = filters[-1]

        self.outputs = nn.ModuleList([OutputLayer(self.num_of_vertices, self.input_length, self.num_of_features,
                                                  output_dim=self.output_dim)
                                      for _ in range(self.predict_length)])

    def forward(self, batch):
        data = batch['X']
        if data.shape[-1] > self.embedding_dim:
            data = data[:, :, :, 0:self.embedding_dim]
        if self.first_layer_embedding is not None:
            data = torch.relu(self.first_layer_embedding(data))
        for stsgcl_layer in self.stsgcl_layers:
            data = stsgcl_layer(data, self.adj)
        return torch.cat([out(data) for out in self.outputs], dim=1)

    def predict(self, batch):
        return self.forward(batch)

    def calculate_loss(self, batch):
        y_true = batch['y']
        y_predicted = self.predict(batch)
        y_true = self._scaler.inverse_transform(y_true[..., :self.output_dim])
        y_predicted = self._scaler.inverse_transform(y_predicted[..., :self.output_dim])
        return huber_loss(y_predicted, y_true)


class EarlyStopping:
    def __init__(self, patience=5):
        self.patience = patience
        self.best = math.inf
        self.wait = 0

    def __call__(self, val_loss):
        if val_loss < self.best:
            self.best, self.wait = val_loss, 0
            return False
        self.wait += 1
        return self.wait >= self.patience


class TrafficStateExecutor:
    def __init__(self, config, model):
        self.config = config
        self.model = model
        self._logger = getLogger()
        self.optimizer = torch.optim.Adam(model.parameters(), lr=config['learning_rate'], eps=1e-8)
        self.lr_scheduler = torch.optim.lr_scheduler.MultiStepLR(self.optimizer, milestones=config['steps'],
                                                                 gamma=config['lr_decay_ratio'])
        self.clip_grad_norm = config.get('clip_grad_norm', True)
        self.max_grad_norm = config.get('max_grad_norm', 5.0)
        self.callbacks = [EarlyStopping(config.get('patience', 5))]

    def train_step(self, batch):
        self.optimizer.zero_grad()
        loss = self.model.calculate_loss(batch)
        loss.backward()  # raises
        if self.clip_grad_norm:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
        self.optimizer.step()
        return loss.item()

    @torch.no_grad()
    def evaluate(self, loader):
        self.model.eval()
        losses = [self.model.calculate_loss(b).item() for b in loader]
        self.model.train()
        return float(np.mean(losses))

    def train(self, train_loader, eval_loader):
        for epoch in range(self.config['max_epoch']):
            start = time.time()
            losses = [self.train_step(batch) for batch in train_loader]
            self.lr_scheduler.step()
            val_loss = self.evaluate(eval_loader)
            self._logger.info('epoch %d train %.4f val %.4f (%.2fs)', epoch, np.mean(losses), val_loss,
                              time.time() - start)
            if any(cb(val_loss) for cb in self.callbacks):
                break


def make_dataset(num_nodes, num_steps, in_win, out_win, batch_size, seed=0):
    rng = np.random.RandomState(seed)
    t = np.arange(num_steps)[:, None]
    flow = 50 + 20 * np.sin(2 * np.pi * t / 24 + rng.rand(num_nodes)) + rng.randn(num_steps, num_nodes)
    scaler = StandardScaler(flow.mean(), flow.std())
    norm = scaler.transform(flow)[..., None].astype(np.float32)
    xs, ys = [], []
    for i in range(num_steps - in_win - out_win):
        xs.append(norm[i:i + in_win])
        ys.append(norm[i + in_win:i + in_win + out_win])
    xs, ys = torch.from_numpy(np.stack(xs)), torch.from_numpy(np.stack(ys))
    batches = [{'X': xs[i:i + batch_size], 'y': ys[i:i + batch_size]} for i in range(0, len(xs), batch_size)]
    adj = (rng.rand(num_nodes, num_nodes) > 0.6).astype(np.float32)
    adj = np.maximum(adj, adj.T)
    return batches, scaler, adj


def main():
    basicConfig(level=INFO)
    torch.manual_seed(0)
    config = {'device': torch.device('cpu'), 'input_window': 8, 'output_window': 3, 'act_type': 'GLU',
              'first_layer_embedding_size': 16, 'filters': [[16, 16, 16], [16, 16, 16]],
              'temporal_emb': True, 'spatial_emb': True, 'learning_rate': 1e-3, 'steps': [5, 10],
              'lr_decay_ratio': 0.1, 'max_epoch': 2, 'patience': 3}
    batches, scaler, adj = make_dataset(num_nodes=6, num_steps=60, in_win=8, out_win=3, batch_size=8)
    data_feature = {'scaler': scaler, 'num_nodes': 6, 'feature_dim': 1, 'output_dim': 1, 'adj_mx': adj}
    model = STSGCN(config, data_feature)
    executor = TrafficStateExecutor(config, model)
    executor.train(batches[:4], batches[4:])


if __name__ == '__main__':
    main()
