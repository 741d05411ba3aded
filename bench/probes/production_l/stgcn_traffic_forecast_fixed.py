# expect: clean
# source: https://github.com/benedekrozemberczki/pytorch_geometric_temporal/issues/57
"""Traffic speed forecasting with a two-block STGCN.

The layer code follows torch_geometric_temporal's STConv/TemporalConv; ChebConv
is a small dense re-implementation (no torch_geometric needed).  The data is a
synthetic sensor graph with daily-periodic speeds, windowed into
(batch, time, nodes, features) samples.
"""
import argparse
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(42)
np.random.seed(42)


class ChebConv(nn.Module):
    r"""Chebyshev spectral graph convolution with symmetric normalisation
    (lambda_max = 2, so the scaled Laplacian is -D^{-1/2} A D^{-1/2})."""

    def __init__(self, in_channels, out_channels, K, normalization="sym", bias=True):
        super().__init__()
        assert normalization == "sym"
        self.K = K
        self.lins = nn.ModuleList([nn.Linear(in_channels, out_channels, bias=False) for _ in range(K)])
        self.bias = nn.Parameter(torch.zeros(out_channels)) if bias else None
        self._cached_lap = None

    def __norm__(self, edge_index, num_nodes, edge_weight):
        if edge_weight is None:
            edge_weight = torch.ones(edge_index.size(1))
        A = torch.zeros(num_nodes, num_nodes)
        A[edge_index[0], edge_index[1]] = edge_weight
        deg = A.sum(1)
        d_inv_sqrt = deg.pow(-0.5)
        d_inv_sqrt[torch.isinf(d_inv_sqrt)] = 0
        return -(d_inv_sqrt[:, None] * A * d_inv_sqrt[None, :])

    def forward(self, x, edge_index, edge_weight=None):
        if self._cached_lap is None or self._cached_lap.size(0) != x.size(0):
            self._cached_lap = self.__norm__(edge_index, x.size(0), edge_weight)
        L = self._cached_lap
        Tx_0 = x
        out = self.lins[0](Tx_0)
        if self.K > 1:
            Tx_1 = L @ x
            out = out + self.lins[1](Tx_1)
        for k in range(2, self.K):
            Tx_2 = 2.0 * (L @ Tx_1) - Tx_0
            out = out + self.lins[k](Tx_2)
            Tx_0, Tx_1 = Tx_1, Tx_2
        if self.bias is not None:
            out = out + self.bias
        return out


class TemporalConv(nn.Module):
    r"""Temporal convolution block applied to nodes in the STGCN Layer (GLU-style)."""

    def __init__(self, in_channels, out_channels, kernel_size=3):
        super(TemporalConv, self).__init__()
        self.conv_1 = nn.Conv2d(in_channels, out_channels, (1, kernel_size))
        self.conv_2 = nn.Conv2d(in_channels, out_channels, (1, kernel_size))
        self.conv_3 = nn.Conv2d(in_channels, out_channels, (1, kernel_size))

    def forward(self, X):
        X = X.permute(0, 3, 2, 1)
        P = self.conv_1(X)
        Q = torch.sigmoid(self.conv_2(X))
        PQ = P + Q
        H = F.relu(PQ + self.conv_3(X))
        H = H.permute(0, 3, 2, 1)
        return H


class STConv(nn.Module):
    r"""Spatio-temporal convolution block using ChebConv Graph Convolutions.
    For an input sequence of length m the output sequence has length m-2(k-1)."""

    def __init__(self, num_nodes, in_channels, hidden_channels, out_channels,
                 kernel_size, K, normalization="sym", bias=True):
        super(STConv, self).__init__()
        self.num_nodes = num_nodes
        self._temporal_conv1 = TemporalConv(in_channels=in_channels, out_channels=hidden_channels,
                                            kernel_size=kernel_size)
        self._graph_conv = ChebConv(in_channels=hidden_channels, out_channels=hidden_channels,
                                    K=K, normalization=normalization, bias=bias)
        self._temporal_conv2 = TemporalConv(in_channels=hidden_channels, out_channels=out_channels,
                                            kernel_size=kernel_size)
        self._batch_norm = nn.BatchNorm2d(num_nodes)

    def forward(self, X, edge_index, edge_weight=None):
        T_0 = self._temporal_conv1(X)
        T = torch.zeros_like(T_0).to(T_0.device)
        for b in range(T_0.size(0)):
            for t in range(T_0.size(1)):
                T[b][t] = self._graph_conv(T_0[b][t], edge_index, edge_weight)

        T = F.relu(T)
        T = self._temporal_conv2(T)
        T = T.permute(0, 2, 1, 3)
        T = self._batch_norm(T)
        T = T.permute(0, 2, 1, 3)
        return T


class STGCN(nn.Module):
    def __init__(self, num_nodes, in_channels, hidden, out_channels, horizon, in_steps, K=3, kernel_size=3):
        super().__init__()
        self.recurrent1 = STConv(num_nodes, in_channels, hidden, out_channels, kernel_size, K)
        self.recurrent2 = STConv(num_nodes, out_channels, hidden, out_channels, kernel_size, K)
        remaining = in_steps - 4 * (kernel_size - 1)
        self.head = nn.Linear(remaining * out_channels, horizon)

    def forward(self, x, edge_indices, edge_weights):
        h1 = self.recurrent1(x, edge_indices, edge_weights)
        h2 = self.recurrent2(h1, edge_indices, edge_weights)
        b, t, n, c = h2.shape
        h2 = h2.permute(0, 2, 1, 3).reshape(b, n, t * c)
        return self.head(F.relu(h2)).permute(0, 2, 1)  # (batch, horizon, nodes)


def build_sensor_graph(num_nodes, k=3):
    coords = np.random.rand(num_nodes, 2)
    dist = np.linalg.norm(coords[:, None] - coords[None], axis=-1)
    src, dst, w = [], [], []
    for i in range(num_nodes):
        for j in np.argsort(dist[i])[1:k + 1]:
            for a, b in ((i, j), (j, i)):
                src.append(a)
                dst.append(b)
                w.append(math.exp(-dist[i, j] ** 2 / 0.1))
    return torch.tensor([src, dst], dtype=torch.long), torch.tensor(w, dtype=torch.float)


def make_windows(num_nodes, num_steps, in_steps, horizon):
    t = np.arange(num_steps)
    phase = np.random.rand(num_nodes) * 2 * np.pi
    speed = 60 + 10 * np.sin(2 * np.pi * t[:, None] / 24 + phase) + np.random.randn(num_steps, num_nodes)
    tod = np.tile((t % 24 / 24.0)[:, None], (1, num_nodes))
    feats = np.stack([(speed - speed.mean()) / speed.std(), tod], -1).astype(np.float32)
    xs, ys = [], []
    for s in range(num_steps - in_steps - horizon):
        xs.append(feats[s:s + in_steps])
        ys.append(feats[s + in_steps:s + in_steps + horizon, :, 0])
    return torch.tensor(np.array(xs)), torch.tensor(np.array(ys))


def masked_mae(pred, target):
    return (pred - target).abs().mean()


def evaluate(model, loader, edge_index, edge_weight):
    model.eval()
    with torch.no_grad():
        maes = [masked_mae(model(x, edge_index, edge_weight), y).item() for x, y in loader]
    return float(np.mean(maes))


def main(args):
    edge_index, edge_weight = build_sensor_graph(args.num_nodes)
    X, Y = make_windows(args.num_nodes, 120, args.in_steps, args.horizon)
    n_train = int(0.8 * len(X))
    train = [(X[i:i + args.batch_size], Y[i:i + args.batch_size]) for i in range(0, n_train, args.batch_size)]
    val = [(X[i:i + args.batch_size], Y[i:i + args.batch_size]) for i in range(n_train, len(X), args.batch_size)]

    model = STGCN(args.num_nodes, 2, args.hidden, args.out_channels, args.horizon, args.in_steps)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=1e-5)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
    for epoch in range(args.epochs):
        model.train()
        for step, (x, y) in enumerate(train[:args.max_steps]):
            optimizer.zero_grad()
            loss = masked_mae(model(x, edge_index, edge_weight), y)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
        scheduler.step()
        print(f"epoch {epoch}: train MAE {loss.item():.4f} val MAE {evaluate(model, val, edge_index, edge_weight):.4f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--num_nodes", type=int, default=8)
    parser.add_argument("--in_steps", type=int, default=12)
    parser.add_argument("--horizon", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=8)
    parser.add_argument("--out_channels", type=int, default=8)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--max_steps", type=int, default=4)
    main(parser.parse_args([]))
