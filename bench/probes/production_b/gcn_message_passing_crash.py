# expect: inplace_version
# source: https://github.com/pyg-team/pytorch_geometric/issues/8953
"""Semi-supervised node classification with a hand-written GCN.

A minimal MessagePassing base class (propagate -> message -> aggregate ->
update) is implemented on top of torch.scatter_reduce so the model runs
without torch_geometric.
"""
import argparse
import inspect
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def scatter(src, index, dim=0, dim_size=None, reduce="sum"):
    if dim_size is None:
        dim_size = int(index.max()) + 1
    size = list(src.shape)
    size[dim] = dim_size
    index = index.view(-1, *([1] * (src.dim() - 1))).expand_as(src)
    out = src.new_zeros(size)
    return out.scatter_reduce(dim, index, src, reduce=reduce, include_self=False)


def add_self_loops(edge_index, num_nodes):
    loops = torch.arange(num_nodes, dtype=edge_index.dtype).unsqueeze(0).repeat(2, 1)
    return torch.cat([edge_index, loops], dim=1)


def degree(index, num_nodes, dtype):
    out = torch.zeros(num_nodes, dtype=dtype)
    return out.index_add_(0, index, torch.ones(index.numel(), dtype=dtype))


class MessagePassing(nn.Module):
    def __init__(self, aggr="add"):
        super().__init__()
        self.aggr = {"add": "sum", "mean": "mean", "max": "amax"}[aggr]
        self._msg_args = [a for a in inspect.signature(self.message).parameters]

    def propagate(self, edge_index, size=None, **kwargs):
        row, col = edge_index
        num_nodes = size if size is not None else next(v for v in kwargs.values()
                                                       if torch.is_tensor(v) and v.dim() == 2).size(0)
        msg_kwargs = {}
        for name in self._msg_args:
            if name.endswith("_j"):
                msg_kwargs[name] = kwargs[name[:-2]].index_select(0, row)
            elif name.endswith("_i"):
                msg_kwargs[name] = kwargs[name[:-2]].index_select(0, col)
            else:
                msg_kwargs[name] = kwargs[name]
        msgs = self.message(**msg_kwargs)
        out = self.aggregate(msgs, col, num_nodes)
        return self.update(out)

    def message(self, x_j):
        return x_j

    def aggregate(self, inputs, index, dim_size):
        return scatter(inputs, index, dim=0, dim_size=dim_size, reduce=self.aggr)

    def update(self, aggr_out):
        return aggr_out


class GCNConv(MessagePassing):
    def __init__(self, in_channels, out_channels):
        super().__init__(aggr="add")
        self.lin = nn.Linear(in_channels, out_channels, bias=False)
        self.bias = nn.Parameter(torch.empty(out_channels))
        self.reset_parameters()

    def reset_parameters(self):
        self.lin.reset_parameters()
        self.bias.data.zero_()

    def forward(self, x, edge_index):
        edge_index = add_self_loops(edge_index, num_nodes=x.size(0))
        x = self.lin(x)
        row, col = edge_index
        deg = degree(col, x.size(0), dtype=x.dtype)
        deg_inv_sqrt = deg.pow(-0.5)
        deg_inv_sqrt[deg_inv_sqrt == float("inf")] = 0
        norm = deg_inv_sqrt[row] * deg_inv_sqrt[col]
        out = self.propagate(edge_index, x=x, norm=norm)
        out += self.bias
        return out

    def message(self, x_j, norm):
        return norm.view(-1, 1) * x_j


class GCN(nn.Module):
    def __init__(self, in_dim, hidden, out_dim, num_layers, dropout):
        super().__init__()
        dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
        self.convs = nn.ModuleList(GCNConv(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.norms = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(num_layers - 1))
        self.dropout = dropout

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = F.dropout(x, p=self.dropout, training=self.training)
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = F.relu(self.norms[i](x))
        return x


def stochastic_block_graph(num_nodes, num_classes, feat_dim, p_in, p_out, seed):
    rng = np.random.RandomState(seed)
    y = rng.randint(0, num_classes, size=num_nodes)
    same = y[:, None] == y[None, :]
    probs = np.where(same, p_in, p_out)
    adj = np.triu(rng.rand(num_nodes, num_nodes) < probs, 1)
    src, dst = np.nonzero(adj)
    edge_index = np.concatenate([np.stack([src, dst]), np.stack([dst, src])], axis=1)
    centers = rng.randn(num_classes, feat_dim)
    x = centers[y] + rng.randn(num_nodes, feat_dim) * 1.5
    perm = rng.permutation(num_nodes)
    train_mask = np.zeros(num_nodes, dtype=bool)
    train_mask[perm[: num_nodes // 4]] = True
    test_mask = ~train_mask
    as_t = lambda a, dt: torch.tensor(a, dtype=dt)
    return (as_t(x, torch.float32), as_t(edge_index, torch.long), as_t(y, torch.long),
            as_t(train_mask, torch.bool), as_t(test_mask, torch.bool))


def run(args):
    x, edge_index, y, train_mask, test_mask = stochastic_block_graph(
        args.num_nodes, args.num_classes, args.feat_dim, args.p_in, args.p_out, seed=0)
    model = GCN(args.feat_dim, args.hidden, args.num_classes, args.num_layers, args.dropout)
    optimizer = torch.optim.Adam([
        {"params": model.convs[0].parameters(), "weight_decay": args.weight_decay},
        {"params": [p for c in model.convs[1:] for p in c.parameters()], "weight_decay": 0.0},
        {"params": model.norms.parameters(), "weight_decay": 0.0},
    ], lr=args.lr)
    best = 0.0
    t0 = time.time()
    for epoch in range(1, args.epochs + 1):
        model.train()
        optimizer.zero_grad()
        out = model(x, edge_index)
        loss = F.cross_entropy(out[train_mask], y[train_mask])
        loss.backward()  # raises
        optimizer.step()
        model.eval()
        with torch.no_grad():
            pred = model(x, edge_index).argmax(-1)
            acc = (pred[test_mask] == y[test_mask]).float().mean().item()
        best = max(best, acc)
        if epoch % args.log_every == 0:
            print(f"Epoch {epoch:03d} loss {loss.item():.4f} test {acc:.3f} best {best:.3f} "
                  f"({time.time() - t0:.2f}s)")
    return best


if __name__ == "__main__":
    torch.manual_seed(0)
    args = argparse.Namespace(num_nodes=120, num_classes=3, feat_dim=16, p_in=0.08, p_out=0.01,
                              hidden=32, num_layers=2, dropout=0.5, lr=0.01, weight_decay=5e-4,
                              epochs=10, log_every=2)
    print("best test acc", run(args))
