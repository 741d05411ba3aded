# expect: clean
# source: https://github.com/sigeisler/robustness_of_gnns_at_scale/issues/4
"""Robustness evaluation of a traffic-congestion GCN under sensor-graph attacks.

A two-layer GCN classifies the congestion level of each loop-detector sensor
from recent speed statistics on a road-sensor graph.  After training, a
PR-BCD style projected-gradient attack perturbs the weights of candidate
sensor links within a budget and measures the accuracy drop.  The GCN caches
its normalised adjacency during training (rgnn_at_scale style).  Sensor data
and the road graph are seeded synthetic data.
"""
import math
from types import SimpleNamespace
from typing import Any, Callable, Optional, Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def scatter_add(src, index, dim_size):
    return torch.zeros(dim_size, dtype=src.dtype).index_add(0, index, src)


def add_remaining_self_loops(edge_idx, edge_weight, fill_value, num_nodes):
    loop = torch.arange(num_nodes)
    edge_idx = torch.cat([edge_idx, torch.stack([loop, loop])], dim=1)
    edge_weight = torch.cat([edge_weight, torch.full((num_nodes,), fill_value)])
    return edge_idx, edge_weight


def grad_with_checkpoint(outputs, inputs):
    inputs = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
    for input in inputs:
        if not input.is_leaf:
            input.retain_grad()
    torch.autograd.backward(outputs)
    grad_outputs = []
    for input in inputs:
        grad_outputs.append(input.grad.clone())
        input.grad.zero_()
    return grad_outputs


class GCNLayer(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.lin = nn.Linear(in_channels, out_channels, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_channels))

    def forward(self, x, edge_idx, edge_weight):
        h = self.lin(x)
        row, col = edge_idx
        out = torch.zeros_like(h).index_add(0, col, h[row] * edge_weight.unsqueeze(-1))
        return out + self.bias


class GCN(nn.Module):
    def __init__(self, n_features, n_classes, n_filters=32, dropout=0.5,
                 do_cache_adj_prep=True, do_normalize_adj_once=True, add_self_loops=True):
        super().__init__()
        self.dropout = dropout
        self.do_cache_adj_prep = do_cache_adj_prep
        self.do_normalize_adj_once = do_normalize_adj_once
        self.add_self_loops = add_self_loops
        self.adj_preped = None
        self.layers = nn.ModuleList([GCNLayer(n_features, n_filters), GCNLayer(n_filters, n_classes)])

    def forward(self, x, edge_idx, edge_weight=None):
        edge_idx, edge_weight = self._cache_if_option_is_set(self._convert_and_normalize, x, edge_idx, edge_weight)
        x = F.dropout(F.relu(self.layers[0](x, edge_idx, edge_weight)), p=self.dropout, training=self.training)
        return self.layers[1](x, edge_idx, edge_weight)

    def release_cache(self):
        self.adj_preped = None

    def _cache_if_option_is_set(self, callable: Callable[..., Any], *inputs) -> Any:
        if self.training and self.adj_preped is not None:
            return self.adj_preped
        else:
            adj_preped = callable(*inputs)
        if self.training and self.do_cache_adj_prep and self.do_normalize_adj_once:
            self.adj_preped = adj_preped
        return adj_preped

    def _convert_and_normalize(self, x, edge_idx, edge_weight: Optional[torch.Tensor] = None
                               ) -> Tuple[torch.Tensor, torch.Tensor]:
        num_nodes = x.shape[0]
        if edge_weight is None:
            edge_weight = torch.ones((edge_idx.size(1),), dtype=torch.float32)
        if self.add_self_loops:
            edge_idx, edge_weight = add_remaining_self_loops(edge_idx, edge_weight, 1., num_nodes)
        row, col = edge_idx
        deg = scatter_add(edge_weight, col, dim_size=num_nodes)
        deg_inv_sqrt = deg.pow(-0.5)
        deg_inv_sqrt = deg_inv_sqrt.masked_fill(torch.isinf(deg_inv_sqrt), 0)
        return edge_idx, deg_inv_sqrt[row] * edge_weight * deg_inv_sqrt[col]


def build_road_network(n_sensors, seed):
    rng = np.random.RandomState(seed)
    coords = rng.rand(n_sensors, 2)
    dist = np.linalg.norm(coords[:, None] - coords[None], axis=-1)
    src, dst = np.nonzero((dist < 0.3) & (dist > 0))
    edge_idx = torch.from_numpy(np.stack([src, dst])).long()
    speeds = rng.rand(n_sensors, 12).astype(np.float32)
    x = torch.from_numpy(np.concatenate([speeds.mean(1, keepdims=True), speeds.std(1, keepdims=True),
                                         speeds[:, -3:], coords.astype(np.float32)], 1))
    y = torch.from_numpy(np.digitize(speeds[:, -1], [0.33, 0.66])).long()
    return x, edge_idx, y


def train_model(model, x, edge_idx, y, train_mask, cfg):
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=5e-4)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=20, gamma=0.5)
    model.train()
    for epoch in range(cfg.train_epochs):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x, edge_idx)[train_mask], y[train_mask])
        loss.backward()
        optimizer.step()
        scheduler.step()
    return loss.item()


@torch.no_grad()
def accuracy(model, x, edge_idx, edge_weight, y, mask):
    model.eval()
    pred = model(x, edge_idx, edge_weight).argmax(-1)
    return (pred[mask] == y[mask]).float().mean().item()


class PRBCD:
    """Projected randomized block coordinate descent on candidate sensor links."""

    def __init__(self, attacked_model, x, edge_idx, y, attack_mask, budget, lr_factor=0.1):
        self.attacked_model = attacked_model
        self.attacked_model.release_cache()
        self.attacked_model.train()
        self.x, self.edge_idx, self.y, self.attack_mask = x, edge_idx, y, attack_mask
        self.budget = budget
        self.lr = lr_factor * budget / math.sqrt(edge_idx.size(1))
        self.perturbed_edge_weight = torch.full((edge_idx.size(1),), 1e-3, requires_grad=True)

    @property
    def modified_edge_weight(self):
        return torch.ones(self.edge_idx.size(1)) - self.perturbed_edge_weight

    def projection(self):
        with torch.no_grad():
            self.perturbed_edge_weight.clamp_(0, 1)
            if self.perturbed_edge_weight.sum() > self.budget:
                self.perturbed_edge_weight.mul_(self.budget / self.perturbed_edge_weight.sum())

    def calculate_loss(self, logits):
        return -F.cross_entropy(logits[self.attack_mask], self.y[self.attack_mask])

    def attack(self, n_epochs):
        for epoch in range(n_epochs):
            logits = self.attacked_model(self.x, self.edge_idx, self.modified_edge_weight)
            loss = self.calculate_loss(logits)
            gradient = grad_with_checkpoint(loss, self.perturbed_edge_weight)[0]
            with torch.no_grad():
                self.perturbed_edge_weight.add_(self.lr * gradient.sign())
            self.projection()
            print('attack epoch %d | loss %.4f | perturbed mass %.3f' % (
                epoch, loss.item(), self.perturbed_edge_weight.sum().item()))
        return self.modified_edge_weight.detach()


def main():
    torch.manual_seed(0)
    cfg = SimpleNamespace(n_sensors=40, lr=1e-2, train_epochs=30, attack_epochs=4, budget=5.0,
                          model=dict(n_filters=32, dropout=0.5, do_cache_adj_prep=False))
    x, edge_idx, y = build_road_network(cfg.n_sensors, seed=0)
    perm = torch.randperm(cfg.n_sensors)
    train_mask = torch.zeros(cfg.n_sensors, dtype=torch.bool)
    train_mask[perm[:24]] = True
    test_mask = ~train_mask
    model = GCN(x.size(1), 3, **cfg.model)
    print('train loss %.4f' % train_model(model, x, edge_idx, y, train_mask, cfg))
    print('clean acc %.3f' % accuracy(model, x, edge_idx, None, y, test_mask))
    attack = PRBCD(model, x, edge_idx, y, test_mask, cfg.budget)
    adv_weight = attack.attack(cfg.attack_epochs)
    print('perturbed acc %.3f' % accuracy(model, x, edge_idx, adv_weight, y, test_mask))


if __name__ == '__main__':
    main()
