# expect: numpy_requires_grad
# source: https://github.com/konstantinklemmer/pe-gnn/issues/5
"""PE-GNN: positional-encoder graph neural network for geographic regression
(e.g. interpolating station air temperature), in the layout of the pe-gnn repo.

Coordinates are encoded with a multi-scale sinusoidal spatial encoder, a GCN on
the k-nearest-neighbour graph predicts the target, and an auxiliary head
predicts the local Moran's I of the target (a measure of spatial
autocorrelation), computed with a light-weight routine that takes a sparse
spatial weight matrix.  Losses are combined with learned uncertainty weights.
"""
import math
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

args = SimpleNamespace(n_stations=96, k=5, batch_size=32, emb_dim=16, hidden=32, min_radius=0.05,
                       max_radius=4.0, freq=8, lr=1e-3, epochs=2, lamb=0.5, uw=True, seed=0)


class SparseWeights:
    """Minimal CSR-like spatial weight matrix (rows: focal unit, cols: neighbours)."""

    def __init__(self, dense):
        self.shape = dense.shape
        self.indptr = np.r_[0, np.cumsum((dense != 0).sum(1))]
        self.indices = np.nonzero(dense)[1]
        self.data = dense[dense != 0]

    def __mul__(self, other):
        dense = np.asarray(other)  # raises
        out = np.zeros(self.shape[0], dtype=np.float64)
        for r in range(self.shape[0]):
            cols = self.indices[self.indptr[r]:self.indptr[r + 1]]
            out[r] = (self.data[self.indptr[r]:self.indptr[r + 1]] * dense[cols]).sum()
        return out


def knn_graph(coords, k):
    d = torch.cdist(coords, coords)
    d.fill_diagonal_(float("inf"))
    nbrs = d.topk(k, largest=False).indices
    row = torch.arange(len(coords)).repeat_interleave(k)
    return torch.stack([row, nbrs.reshape(-1)])


def knn_to_adj(edge_index, n):
    adj = np.zeros((n, n), dtype=np.float64)
    adj[edge_index[0].numpy(), edge_index[1].numpy()] = 1.0
    return adj / adj.sum(1, keepdims=True)


def makeEdgeWeight(coords, edge_index):
    dist = (coords[edge_index[0]] - coords[edge_index[1]]).norm(dim=-1)
    return torch.exp(-dist / dist.max())


def normal_torch(tensor, min_val=0):
    t_min, t_max = torch.min(tensor), torch.max(tensor)
    if t_min == 0 and t_max == 0:
        return tensor.clone().detach().requires_grad_(True)
    if min_val == -1:
        tensor_norm = 2 * ((tensor - t_min) / (t_max - t_min)) - 1
    else:
        tensor_norm = (tensor - t_min) / (t_max - t_min)
    return tensor_norm.clone().detach().requires_grad_(True)


def lw_tensor_local_moran(y, w_sparse, na_to_zero=True, norm=True, norm_min_val=0):
    y = y.reshape(-1)
    n = len(y)
    n_1 = n - 1
    z = y - y.mean()
    sy = y.std()
    z /= sy
    den = (z * z).sum()
    zl = torch.tensor(w_sparse * z, dtype=torch.float32)
    mi = n_1 * z * zl / den
    if na_to_zero:
        mi[torch.isnan(mi)] = 0
    if norm:
        mi = normal_torch(mi, min_val=norm_min_val)
    return mi.reshape(-1, 1)


class SpatialEncoder(nn.Module):
    """Multi-scale sinusoidal encoding of 2-D coordinates (Space2Vec 'theory' style)."""

    def __init__(self, emb_dim, min_radius, max_radius, freq):
        super().__init__()
        log_inc = math.log(max_radius / min_radius) / max(freq - 1, 1)
        self.register_buffer("scales", min_radius * torch.exp(torch.arange(freq) * log_inc))
        self.ffn = nn.Sequential(nn.Linear(4 * freq, emb_dim), nn.ReLU(), nn.Linear(emb_dim, emb_dim))

    def forward(self, coords):
        angles = coords[:, :, None] / self.scales
        feats = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1).reshape(len(coords), -1)
        return self.ffn(feats)


class GCNConv(nn.Module):
    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.lin = nn.Linear(in_dim, out_dim)

    def forward(self, x, edge_index, edge_weight):
        h = self.lin(x)
        agg = torch.zeros_like(h).index_add(0, edge_index[0], h[edge_index[1]] * edge_weight[:, None])
        deg = torch.zeros(len(x)).index_add(0, edge_index[0], edge_weight).clamp(min=1e-6)
        return h + agg / deg[:, None]


class PEGCN(nn.Module):
    def __init__(self, num_features_in, emb_dim, hidden, spatial):
        super().__init__()
        self.spenc = spatial
        self.conv1 = GCNConv(num_features_in + emb_dim, hidden)
        self.conv2 = GCNConv(hidden, hidden)
        self.fc = nn.Linear(hidden, 1)
        self.fc_morans = nn.Linear(hidden, 1)

    def forward(self, x, c, ei, ew):
        emb = self.spenc(c)
        h = F.relu(self.conv1(torch.cat([x, emb], dim=1), ei, ew))
        h = F.dropout(h, p=0.1, training=self.training)
        h = F.relu(self.conv2(h, ei, ew))
        return self.fc(h), self.fc_morans(h)


def make_stations(seed):
    rng = np.random.RandomState(seed)
    c = rng.uniform(0, 10, size=(args.n_stations, 2))
    elev = rng.uniform(0, 2, size=(args.n_stations, 1))
    temp = 15 + 3 * np.sin(c[:, :1] / 2) - 4 * elev + rng.normal(0, 0.3, size=(args.n_stations, 1))
    x = torch.tensor(np.c_[elev, rng.normal(size=(args.n_stations, 2))], dtype=torch.float32)
    y = normal_torch(torch.tensor(temp, dtype=torch.float32))
    return x, torch.tensor(c, dtype=torch.float32), y


class Trainer:
    def __init__(self, model, k, batch_size, lamb, uw):
        self.model, self.k, self.batch_size, self.lamb, self.uw = model, k, batch_size, lamb, uw
        self.criterion = nn.MSELoss(reduction="none")
        self.log_vars = nn.Parameter(torch.zeros(2))
        self.optimizer = torch.optim.Adam(list(model.parameters()) + [self.log_vars], lr=args.lr)

    def train_step(self, x, c, y):
        ei = knn_graph(c, k=self.k)
        ew = makeEdgeWeight(c, ei)
        self.optimizer.zero_grad()
        outputs1, outputs2 = self.model(x, c, ei, ew)
        loss1 = self.criterion(outputs1.reshape(-1), y.reshape(-1).float())
        if self.lamb > 0:
            moran_weight_matrix = knn_to_adj(ei, len(c))
            with torch.enable_grad():
                targets2 = lw_tensor_local_moran(y, SparseWeights(moran_weight_matrix))
            loss2 = self.criterion(outputs2.reshape(-1), targets2.reshape(-1).float())
            if self.uw:
                p1, p2 = torch.exp(-self.log_vars[0]), torch.exp(-self.log_vars[1])
                loss = (p1 * loss1 + self.log_vars[0]).sum() + (p2 * loss2 + self.log_vars[1]).sum()
            else:
                loss = loss1.sum() + self.lamb * loss2.sum()
        else:
            loss = loss1.sum()
        loss.backward()
        self.optimizer.step()
        return loss.item() / len(x)

    @torch.no_grad()
    def evaluate(self, x, c, y):
        self.model.eval()
        ei = knn_graph(c, k=self.k)
        pred, _ = self.model(x, c, ei, makeEdgeWeight(c, ei))
        self.model.train()
        return F.mse_loss(pred.reshape(-1), y.reshape(-1)).item()


def main():
    torch.manual_seed(args.seed)
    x, c, y = make_stations(args.seed)
    n_train = int(0.75 * len(x))
    model = PEGCN(x.shape[1], args.emb_dim, args.hidden,
                  SpatialEncoder(args.emb_dim, args.min_radius, args.max_radius, args.freq))
    trainer = Trainer(model, args.k, args.batch_size, args.lamb, args.uw)
    for epoch in range(args.epochs):
        perm = torch.randperm(n_train)
        losses = []
        for s in range(0, n_train, args.batch_size):
            idx = perm[s:s + args.batch_size]
            losses.append(trainer.train_step(x[idx], c[idx], y[idx]))
        test_mse = trainer.evaluate(x[n_train:], c[n_train:], y[n_train:])
        print(f"epoch {epoch}: train {np.mean(losses):.4f} test mse {test_mse:.4f}")


if __name__ == "__main__":
    main()
