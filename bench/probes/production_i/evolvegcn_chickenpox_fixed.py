# expect: clean
# source: https://github.com/benedekrozemberczki/pytorch_geometric_temporal/issues/305
"""EvolveGCN-H on a chickenpox-like county graph (recurrent GCN example).

Port of torch_geometric_temporal's EvolveGCNH layer and its example script,
written against plain torch so it runs without torch_geometric.
"""
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn import GRU


@dataclass
class ExperimentConfig:
    num_nodes: int = 20
    lags: int = 4
    num_snapshots: int = 30
    train_ratio: float = 0.2
    epochs: int = 4
    lr: float = 0.01
    seed: int = 7


def glorot(tensor):
    if tensor is not None:
        stdv = math.sqrt(6.0 / (tensor.size(-2) + tensor.size(-1)))
        tensor.data.uniform_(-stdv, stdv)


def gcn_norm(edge_index, edge_weight, num_nodes, improved=False, add_self_loops=True):
    fill_value = 2.0 if improved else 1.0
    if edge_weight is None:
        edge_weight = torch.ones(edge_index.size(1))
    if add_self_loops:
        loop = torch.arange(num_nodes)
        edge_index = torch.cat([edge_index, torch.stack([loop, loop])], dim=1)
        edge_weight = torch.cat([edge_weight, torch.full((num_nodes,), fill_value)])
    row, col = edge_index
    deg = torch.zeros(num_nodes).index_add(0, col, edge_weight)
    deg_inv_sqrt = deg.pow(-0.5)
    deg_inv_sqrt[deg_inv_sqrt == float("inf")] = 0
    return edge_index, deg_inv_sqrt[row] * edge_weight * deg_inv_sqrt[col]


class GCNConv_Fixed_W(torch.nn.Module):
    """GCN propagation whose weight matrix is supplied by the caller."""

    def __init__(self, in_channels, out_channels, improved=False, cached=False,
                 add_self_loops=True, normalize=True):
        super().__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.improved = improved
        self.cached = cached
        self.add_self_loops = add_self_loops
        self.normalize = normalize
        self._cached_edge_index = None

    def forward(self, W, x, edge_index, edge_weight=None):
        if self.normalize:
            cache = self._cached_edge_index
            if cache is None:
                edge_index, edge_weight = gcn_norm(edge_index, edge_weight, x.size(0),
                                                   self.improved, self.add_self_loops)
                if self.cached:
                    self._cached_edge_index = (edge_index, edge_weight)
            else:
                edge_index, edge_weight = cache
        x = torch.matmul(x, W)
        row, col = edge_index
        msg = x[row] * edge_weight.view(-1, 1)
        return torch.zeros_like(x).index_add(0, col, msg)


class TopKPooling(torch.nn.Module):
    def __init__(self, in_channels, ratio):
        super().__init__()
        self.ratio = ratio
        self.weight = torch.nn.Parameter(torch.empty(1, in_channels))
        glorot(self.weight)

    def forward(self, x, edge_index):
        score = (x * self.weight).sum(dim=-1) / self.weight.norm(p=2, dim=-1)
        score = torch.tanh(score)
        k = int(math.ceil(self.ratio * x.size(0)))
        perm = torch.topk(score, k).indices
        x = x[perm] * score[perm].view(-1, 1)
        return x, edge_index, perm


class EvolveGCNH(torch.nn.Module):
    def __init__(self, num_of_nodes, in_channels, improved=False, cached=False,
                 normalize=True, add_self_loops=True):
        super().__init__()
        self.num_of_nodes = num_of_nodes
        self.in_channels = in_channels
        self.improved = improved
        self.cached = cached
        self.normalize = normalize
        self.add_self_loops = add_self_loops
        self.weight = None
        self.initial_weight = torch.nn.Parameter(torch.Tensor(1, in_channels, in_channels))
        self._create_layers()
        self.reset_parameters()

    def reset_parameters(self):
        glorot(self.initial_weight)

    def reinitialize_weight(self):
        self.weight = None

    def _create_layers(self):
        self.ratio = self.in_channels / self.num_of_nodes
        self.pooling_layer = TopKPooling(self.in_channels, self.ratio)
        self.recurrent_layer = GRU(input_size=self.in_channels,
                                   hidden_size=self.in_channels, num_layers=1)
        self.conv_layer = GCNConv_Fixed_W(self.in_channels, self.in_channels,
                                          improved=self.improved, cached=self.cached,
                                          normalize=self.normalize,
                                          add_self_loops=self.add_self_loops)

    def forward(self, X, edge_index, edge_weight=None):
        X_tilde = self.pooling_layer(X, edge_index)
        X_tilde = X_tilde[0][None, :, :]
        if self.weight is None:
            _, self.weight = self.recurrent_layer(X_tilde, self.initial_weight)
        else:
            _, self.weight = self.recurrent_layer(X_tilde, self.weight)
        X = self.conv_layer(self.weight.squeeze(dim=0), X, edge_index, edge_weight)
        return X


class RecurrentGCN(torch.nn.Module):
    def __init__(self, node_count, node_features):
        super().__init__()
        self.recurrent = EvolveGCNH(node_count, node_features)
        self.linear = torch.nn.Linear(node_features, 1)

    def forward(self, x, edge_index, edge_weight):
        h = self.recurrent(x, edge_index, edge_weight)
        h = F.relu(h)
        return self.linear(h)


class Snapshot:
    def __init__(self, x, edge_index, edge_attr, y):
        self.x, self.edge_index, self.edge_attr, self.y = x, edge_index, edge_attr, y


class StaticGraphTemporalSignal:
    def __init__(self, edge_index, edge_weight, features, targets):
        self.edge_index = edge_index
        self.edge_weight = edge_weight
        self.features = features
        self.targets = targets

    def __len__(self):
        return len(self.features)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return StaticGraphTemporalSignal(self.edge_index, self.edge_weight,
                                             self.features[idx], self.targets[idx])
        return Snapshot(torch.FloatTensor(self.features[idx]), self.edge_index,
                        self.edge_weight, torch.FloatTensor(self.targets[idx]).view(-1, 1))

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]


class ChickenpoxLikeLoader:
    """Synthetic weekly case counts diffusing over a county adjacency graph."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.rng = np.random.RandomState(cfg.seed)

    def _graph(self):
        n = self.cfg.num_nodes
        src, dst = [], []
        for i in range(n):
            for j in self.rng.choice(n, 3, replace=False):
                if i != j:
                    src += [i, int(j)]
                    dst += [int(j), i]
        edge_index = torch.LongTensor([src, dst])
        return edge_index, torch.ones(edge_index.size(1))

    def get_dataset(self):
        n, lags, T = self.cfg.num_nodes, self.cfg.lags, self.cfg.num_snapshots
        edge_index, edge_weight = self._graph()
        series = np.zeros((T + lags + 1, n))
        series[0] = self.rng.rand(n)
        for t in range(1, len(series)):
            series[t] = 0.8 * series[t - 1] + 0.2 * self.rng.randn(n)
        series = (series - series.mean(0)) / (series.std(0) + 1e-6)
        features = [series[t:t + lags].T for t in range(T)]
        targets = [series[t + lags] for t in range(T)]
        return StaticGraphTemporalSignal(edge_index, edge_weight, features, targets)


def temporal_signal_split(data_iterator, train_ratio=0.8):
    train_snapshots = int(train_ratio * len(data_iterator))
    return data_iterator[0:train_snapshots], data_iterator[train_snapshots:]


def evaluate(model, dataset):
    model.eval()
    cost = 0
    with torch.no_grad():
        for time, snapshot in enumerate(dataset):
            y_hat = model(snapshot.x, snapshot.edge_index, snapshot.edge_attr)
            cost = cost + torch.mean((y_hat - snapshot.y) ** 2)
    return (cost / (time + 1)).item()


def main():
    cfg = ExperimentConfig()
    torch.manual_seed(cfg.seed)
    loader = ChickenpoxLikeLoader(cfg)
    dataset = loader.get_dataset()
    train_dataset, test_dataset = temporal_signal_split(dataset, train_ratio=cfg.train_ratio)

    model = RecurrentGCN(node_features=cfg.lags, node_count=cfg.num_nodes)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)

    model.train()
    for epoch in range(cfg.epochs):
        cost = 0
        for time, snapshot in enumerate(train_dataset):
            y_hat = model(snapshot.x, snapshot.edge_index, snapshot.edge_attr)
            cost = cost + torch.mean((y_hat - snapshot.y) ** 2)
        cost = cost / (time + 1)
        cost.backward()
        optimizer.step()
        optimizer.zero_grad()

        # cutoff the graph of the hidden state between epochs
        model.recurrent.weight = model.recurrent.weight.detach()
        print("epoch {:d} train MSE {:.4f}".format(epoch, cost.item()))

    print("MSE: {:.4f}".format(evaluate(model, test_dataset)))


if __name__ == "__main__":
    main()
