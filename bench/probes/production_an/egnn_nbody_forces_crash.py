# expect: leaf_inplace
# source: https://github.com/vgsatorras/egnn/issues/3
"""E(n)-equivariant GNN (EGNN, egnn_clean layout) used as a learned interatomic
potential for a small N-body system.

The potential predicts a per-system energy from node features and coordinates;
when `predict_forces` is set, forces are obtained as -dE/dx by autograd and the
model is trained on energies and forces (force matching) of synthetic
Lennard-Jones-like clusters.
"""
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn


@dataclass
class Config:
    n_nodes: int = 6
    n_systems: int = 32
    batch_size: int = 8
    hidden_nf: int = 32
    n_layers: int = 3
    lr: float = 5e-4
    epochs: int = 2
    predict_forces: bool = True
    force_weight: float = 10.0
    seed: int = 0


class E_GCL(nn.Module):
    """E(n) Equivariant Convolutional Layer."""

    def __init__(self, input_nf, output_nf, hidden_nf, act_fn=nn.SiLU(), residual=True,
                 attention=False, normalize=False, coords_agg="mean", tanh=False):
        super().__init__()
        input_edge = input_nf * 2
        self.residual = residual
        self.attention = attention
        self.normalize = normalize
        self.coords_agg = coords_agg
        self.tanh = tanh
        self.epsilon = 1e-8
        edge_coords_nf = 1
        self.edge_mlp = nn.Sequential(nn.Linear(input_edge + edge_coords_nf, hidden_nf), act_fn,
                                      nn.Linear(hidden_nf, hidden_nf), act_fn)
        self.node_mlp = nn.Sequential(nn.Linear(hidden_nf + input_nf, hidden_nf), act_fn,
                                      nn.Linear(hidden_nf, output_nf))
        layer = nn.Linear(hidden_nf, 1, bias=False)
        torch.nn.init.xavier_uniform_(layer.weight, gain=0.001)
        coord_mlp = [nn.Linear(hidden_nf, hidden_nf), act_fn, layer]
        if self.tanh:
            coord_mlp.append(nn.Tanh())
        self.coord_mlp = nn.Sequential(*coord_mlp)
        if self.attention:
            self.att_mlp = nn.Sequential(nn.Linear(hidden_nf, 1), nn.Sigmoid())

    def edge_model(self, source, target, radial):
        out = torch.cat([source, target, radial], dim=1)
        out = self.edge_mlp(out)
        if self.attention:
            out = out * self.att_mlp(out)
        return out

    def node_model(self, x, edge_index, edge_attr):
        row, col = edge_index
        agg = unsorted_segment_sum(edge_attr, row, num_segments=x.size(0))
        out = torch.cat([x, agg], dim=1)
        out = self.node_mlp(out)
        if self.residual:
            out = x + out
        return out, agg

    def coord_model(self, coord, edge_index, coord_diff, edge_feat):
        row, col = edge_index
        trans = coord_diff * self.coord_mlp(edge_feat)
        if self.coords_agg == "sum":
            agg = unsorted_segment_sum(trans, row, num_segments=coord.size(0))
        elif self.coords_agg == "mean":
            agg = unsorted_segment_mean(trans, row, num_segments=coord.size(0))
        else:
            raise Exception("Wrong coords_agg parameter" % self.coords_agg)
        coord += agg  # raises
        return coord

    def coord2radial(self, edge_index, coord):
        row, col = edge_index
        coord_diff = coord[row] - coord[col]
        radial = torch.sum(coord_diff ** 2, 1).unsqueeze(1)
        if self.normalize:
            norm = torch.sqrt(radial).detach() + self.epsilon
            coord_diff = coord_diff / norm
        return radial, coord_diff

    def forward(self, h, edge_index, coord):
        row, col = edge_index
        radial, coord_diff = self.coord2radial(edge_index, coord)
        edge_feat = self.edge_model(h[row], h[col], radial)
        coord = self.coord_model(coord, edge_index, coord_diff, edge_feat)
        h, agg = self.node_model(h, edge_index, edge_feat)
        return h, coord


class EGNN(nn.Module):
    def __init__(self, in_node_nf, hidden_nf, out_node_nf, n_layers=4, residual=True,
                 attention=False, normalize=False, tanh=False):
        super().__init__()
        self.n_layers = n_layers
        self.embedding_in = nn.Linear(in_node_nf, hidden_nf)
        self.embedding_out = nn.Linear(hidden_nf, out_node_nf)
        for i in range(n_layers):
            self.add_module("gcl_%d" % i, E_GCL(hidden_nf, hidden_nf, hidden_nf, residual=residual,
                                                 attention=attention, normalize=normalize, tanh=tanh))

    def forward(self, h, x, edges):
        h = self.embedding_in(h)
        for i in range(self.n_layers):
            h, x = self._modules["gcl_%d" % i](h, edges, x)
        h = self.embedding_out(h)
        return h, x


def unsorted_segment_sum(data, segment_ids, num_segments):
    result = data.new_full((num_segments, data.size(1)), 0)
    segment_ids = segment_ids.unsqueeze(-1).expand(-1, data.size(1))
    result.scatter_add_(0, segment_ids, data)
    return result


def unsorted_segment_mean(data, segment_ids, num_segments):
    segment_ids = segment_ids.unsqueeze(-1).expand(-1, data.size(1))
    result = data.new_full((num_segments, data.size(1)), 0)
    count = data.new_full((num_segments, data.size(1)), 0)
    result.scatter_add_(0, segment_ids, data)
    count.scatter_add_(0, segment_ids, torch.ones_like(data))
    return result / count.clamp(min=1)


def get_edges_batch(n_nodes, batch_size):
    rows, cols = [], []
    for b in range(batch_size):
        for i in range(n_nodes):
            for j in range(n_nodes):
                if i != j:
                    rows.append(b * n_nodes + i)
                    cols.append(b * n_nodes + j)
    return [torch.LongTensor(rows), torch.LongTensor(cols)]


class PairPotentialDataset:
    """Random clusters labelled with a soft Lennard-Jones energy and its forces."""

    def __init__(self, cfg):
        rng = np.random.RandomState(cfg.seed)
        pos = torch.tensor(rng.normal(scale=1.2, size=(cfg.n_systems, cfg.n_nodes, 3)), dtype=torch.float32)
        charges = torch.tensor(rng.randint(1, 4, size=(cfg.n_systems, cfg.n_nodes, 1)), dtype=torch.float32)
        p = pos.clone().requires_grad_(True)
        energy = self.energy(p, charges)
        forces = -torch.autograd.grad(energy.sum(), p)[0]
        self.pos, self.charges = pos, charges
        self.energy_y, self.forces_y = energy.detach(), forces.detach()

    @staticmethod
    def energy(pos, charges):
        d = torch.cdist(pos, pos) + torch.eye(pos.shape[1])
        inv6 = (1.0 / (d ** 2 + 0.5)) ** 3
        pair = (inv6 ** 2 - inv6) * (charges * charges.transpose(1, 2))
        mask = 1 - torch.eye(pos.shape[1])
        return 0.5 * (pair * mask).sum(dim=(1, 2))

    def batches(self, batch_size):
        for s in range(0, len(self.pos), batch_size):
            yield (self.pos[s:s + batch_size], self.charges[s:s + batch_size],
                   self.energy_y[s:s + batch_size], self.forces_y[s:s + batch_size])


class EGNNPotential(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.egnn = EGNN(in_node_nf=1, hidden_nf=cfg.hidden_nf, out_node_nf=1, n_layers=cfg.n_layers)
        self._edges = {}

    def edges(self, batch_size):
        if batch_size not in self._edges:
            self._edges[batch_size] = get_edges_batch(self.cfg.n_nodes, batch_size)
        return self._edges[batch_size]

    def forward(self, pos, charges):
        bs, n, _ = pos.shape
        h = charges.reshape(bs * n, 1)
        x = pos.reshape(bs * n, 3)
        node_energy, _ = self.egnn(h, x, self.edges(bs))
        return node_energy.reshape(bs, n).sum(dim=1)


class Trainer:
    def __init__(self, cfg):
        self.cfg = cfg
        self.model = EGNNPotential(cfg)
        self.data = PairPotentialDataset(cfg)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.lr, weight_decay=1e-12)
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, T_max=cfg.epochs)

    def predict(self, pos, charges):
        if self.cfg.predict_forces:
            pos = pos.clone().requires_grad_(True)
            energy = self.model(pos, charges)
            forces = -torch.autograd.grad(energy.sum(), pos, create_graph=self.model.training)[0]
            return energy, forces
        return self.model(pos, charges), None

    def train_step(self, batch):
        pos, charges, e_true, f_true = batch
        self.optimizer.zero_grad()
        e_pred, f_pred = self.predict(pos, charges)
        loss = ((e_pred - e_true) ** 2).mean()
        if f_pred is not None:
            loss = loss + self.cfg.force_weight * ((f_pred - f_true) ** 2).mean()
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def evaluate(self):
        self.model.eval()
        errs = []
        for pos, charges, e_true, _ in self.data.batches(self.cfg.batch_size):
            with torch.no_grad():
                errs.append((self.model(pos, charges) - e_true).abs().mean().item())
        self.model.train()
        return float(np.mean(errs))

    def fit(self):
        for epoch in range(self.cfg.epochs):
            losses = [self.train_step(b) for b in self.data.batches(self.cfg.batch_size)]
            self.scheduler.step()
            print(f"epoch {epoch}: loss {np.mean(losses):.4f} energy MAE {self.evaluate():.4f}")


def main():
    cfg = Config()
    torch.manual_seed(cfg.seed)
    Trainer(cfg).fit()


if __name__ == "__main__":
    main()
