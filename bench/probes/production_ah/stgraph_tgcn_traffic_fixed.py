# expect: clean
# source: https://github.com/bfGraph/STGraph/issues/4
"""Temporal GCN (T-GCN) traffic-speed forecaster on a static road graph.

A GRU whose gates are graph convolutions is trained snapshot by snapshot over a
sequence of sensor readings (synthetic, seeded), in the style of the STGraph /
PyG-Temporal TGCN benchmarks: one optimizer step per temporal snapshot, a
validation pass per epoch and a small callback system for logging.
"""
import argparse
import math
import time
from collections import defaultdict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args(argv=None):
    parser = argparse.ArgumentParser(description="TGCN traffic forecasting")
    parser.add_argument("--num-nodes", type=int, default=20)
    parser.add_argument("--in-feats", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--num-snapshots", type=int, default=12)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--weight-decay", type=float, default=5e-4)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def build_road_graph(num_nodes, seed):
    rng = np.random.RandomState(seed)
    adj = np.zeros((num_nodes, num_nodes), dtype=np.float32)
    for i in range(num_nodes - 1):
        adj[i, i + 1] = adj[i + 1, i] = 1.0
    for _ in range(num_nodes // 2):
        a, b = rng.randint(0, num_nodes, size=2)
        if a != b:
            adj[a, b] = adj[b, a] = 1.0
    adj += np.eye(num_nodes, dtype=np.float32)
    deg = adj.sum(1)
    d_inv_sqrt = np.power(deg, -0.5)
    norm = d_inv_sqrt[:, None] * adj * d_inv_sqrt[None, :]
    return torch.from_numpy(norm)


class TrafficSnapshots:
    """Sequence of (features, target) pairs, one per time step."""

    def __init__(self, args):
        g = torch.Generator().manual_seed(args.seed)
        t = torch.arange(args.num_snapshots + 1, dtype=torch.float32)
        base = torch.sin(t[:, None] / 3.0 + torch.rand(1, args.num_nodes, generator=g) * math.pi)
        noise = 0.05 * torch.randn(args.num_snapshots + 1, args.num_nodes, generator=g)
        speed = base + noise
        lags = [torch.roll(speed, k, dims=0) for k in range(args.in_feats)]
        self.x = torch.stack(lags, dim=-1)
        self.y = torch.roll(speed, -1, dims=0)
        self.n = args.num_snapshots

    def __len__(self):
        return self.n

    def __iter__(self):
        for i in range(self.n):
            yield self.x[i], self.y[i]


class GraphConv(nn.Module):
    def __init__(self, in_feats, out_feats, adj):
        super().__init__()
        self.lin = nn.Linear(in_feats, out_feats)
        self.register_buffer("adj", adj)

    def forward(self, x):
        return self.adj @ self.lin(x)


class TGCNCell(nn.Module):
    """GRU cell whose update, reset and candidate gates are graph convolutions."""

    def __init__(self, in_feats, hidden, adj):
        super().__init__()
        self.hidden = hidden
        self.conv_z = GraphConv(in_feats, hidden, adj)
        self.lin_z = nn.Linear(2 * hidden, hidden)
        self.conv_r = GraphConv(in_feats, hidden, adj)
        self.lin_r = nn.Linear(2 * hidden, hidden)
        self.conv_h = GraphConv(in_feats, hidden, adj)
        self.lin_h = nn.Linear(2 * hidden, hidden)

    def forward(self, x, h):
        z = torch.sigmoid(self.lin_z(torch.cat([self.conv_z(x), h], dim=-1)))
        r = torch.sigmoid(self.lin_r(torch.cat([self.conv_r(x), h], dim=-1)))
        c = torch.tanh(self.lin_h(torch.cat([self.conv_h(x), h * r], dim=-1)))
        return z * h + (1 - z) * c


class RecurrentGCN(nn.Module):
    def __init__(self, args, adj):
        super().__init__()
        self.cell = TGCNCell(args.in_feats, args.hidden, adj)
        self.head = nn.Linear(args.hidden, 1)
        self.num_nodes = args.num_nodes
        self.hidden = args.hidden
        self._h = None

    def reset_state(self):
        self._h = None

    @property
    def state(self):
        if self._h is None:
            self._h = torch.zeros(self.num_nodes, self.hidden)
        return self._h

    def forward(self, x):
        h = self.cell(x, self.state)
        self._h = h.detach()
        return self.head(F.relu(h)).squeeze(-1)


class LossLogger:
    def __init__(self):
        self.history = defaultdict(list)

    def on_step_end(self, trainer, loss):
        self.history["train"].append(loss)

    def on_epoch_end(self, trainer, epoch, val_mse):
        self.history["val"].append(val_mse)
        print(f"epoch {epoch}: train {np.mean(self.history['train'][-len(trainer.data):]):.4f} val {val_mse:.4f}")


class Trainer:
    def __init__(self, model, data, args, callbacks=()):
        self.model = model
        self.data = data
        self.args = args
        self.callbacks = list(callbacks)
        self.optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=1, gamma=0.9)
        self.global_step = 0

    def _fire(self, name, *a):
        for cb in self.callbacks:
            getattr(cb, name)(self, *a)

    def train_step(self, x, y):
        self.optimizer.zero_grad()
        y_hat = self.model(x)
        loss = F.mse_loss(y_hat, y)
        loss.backward()
        self.optimizer.step()
        self.global_step += 1
        return loss.item()

    @torch.no_grad()
    def evaluate(self):
        self.model.eval()
        self.model.reset_state()
        errs = [F.mse_loss(self.model(x), y).item() for x, y in self.data]
        self.model.train()
        return float(np.mean(errs))

    def fit(self):
        for epoch in range(self.args.epochs):
            self.model.train()
            self.model.reset_state()
            for x, y in self.data:
                loss = self.train_step(x, y)
                self._fire("on_step_end", loss)
            self.scheduler.step()
            self._fire("on_epoch_end", epoch, self.evaluate())


def main(argv=None):
    args = get_args(argv)
    torch.manual_seed(args.seed)
    adj = build_road_graph(args.num_nodes, args.seed)
    data = TrafficSnapshots(args)
    model = RecurrentGCN(args, adj)
    trainer = Trainer(model, data, args, callbacks=[LossLogger()])
    t0 = time.time()
    trainer.fit()
    print(f"done in {time.time() - t0:.2f}s, {trainer.global_step} steps")


if __name__ == "__main__":
    main([])
