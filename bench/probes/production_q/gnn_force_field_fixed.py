# expect: clean
# source: https://github.com/dmlc/dgl/issues/1493
"""Message-passing energy model for small molecules with force matching.

Each molecule is a radius graph whose nodes carry [x, y, z, partial charge].
A graph convolution computes per-atom energies with a user-defined message
function; the molecular energy is their sum plus per-element reference
energies, and forces are obtained as the negative gradient of the energy
with respect to the node input. A trainer fits energies and forces jointly.
A minimal graph container stands in for DGL.
"""
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

device = torch.device("cpu")


@dataclass
class Config:
    seed: int = 3
    n_train: int = 48
    n_val: int = 16
    cutoff: float = 2.5
    in_feats: int = 4
    hidden: int = 32
    n_elements: int = 4
    batch_size: int = 8
    epochs: int = 3
    lr: float = 2e-3
    energy_weight: float = 0.1
    force_weight: float = 1.0


class EdgeBatch:
    def __init__(self, g):
        self.src = {k: v[g.src] for k, v in g.ndata.items()}
        self.dst = {k: v[g.dst] for k, v in g.ndata.items()}


class fn:
    @staticmethod
    def sum(msg, out):
        return ("sum", msg, out)


class Graph:
    def __init__(self, src, dst, num_nodes, ndata=None):
        self.src, self.dst, self.num_nodes = src, dst, num_nodes
        self.ndata = {} if ndata is None else ndata

    srcdata = property(lambda self: self.ndata)
    dstdata = property(lambda self: self.ndata)

    def local_var(self):
        return Graph(self.src, self.dst, self.num_nodes, dict(self.ndata))

    def update_all(self, message_func, reduce_func):
        _, msg, out = reduce_func
        m = message_func(EdgeBatch(self))[msg]
        self.ndata[out] = torch.zeros((self.num_nodes,) + m.shape[1:], dtype=m.dtype).index_add(0, self.dst, m)


def batch(graphs):
    src, dst, off, gid = [], [], 0, []
    for i, g in enumerate(graphs):
        src.append(g.src + off)
        dst.append(g.dst + off)
        gid.append(torch.full((g.num_nodes,), i, dtype=torch.long))
        off += g.num_nodes
    bg = Graph(torch.cat(src), torch.cat(dst), off)
    for k in graphs[0].ndata:
        bg.ndata[k] = torch.cat([g.ndata[k] for g in graphs])
    bg.graph_ids, bg.batch_size = torch.cat(gid), len(graphs)
    return bg


class AtomEnergyConv(nn.Module):
    def __init__(self, in_feats, hidden):
        super().__init__()
        self.lin = nn.Sequential(nn.Linear(in_feats, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                                 nn.Linear(hidden, 1))

    @property
    def weight(self):
        return self.lin[0].weight

    def message_func(self, edges):
        feat = edges.src["h"].to(self.weight)
        message = self.lin(feat)
        return {"m": message}

    def forward(self, G, feat):
        graph = G.local_var()
        graph.srcdata["h"] = feat
        graph.update_all(self.message_func, fn.sum(msg="m", out="h"))
        return graph.dstdata["h"]


class EnergyForceModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.conv = AtomEnergyConv(cfg.in_feats, cfg.hidden)
        self.atomref = nn.Embedding(cfg.n_elements, 1)
        nn.init.zeros_(self.atomref.weight)
        self.register_buffer("energy_scale", torch.tensor(1.0))

    def forward(self, G, feat):
        atom_e = self.conv(G, feat) * self.energy_scale + self.atomref(G.ndata["z"])
        out = torch.zeros(G.batch_size, 1).index_add(0, G.graph_ids, atom_e)
        d = -torch.autograd.grad(out.sum(), feat, create_graph=True)[0]
        return out.squeeze(1), d[:, :3]


def reference_potential(pos, z, charge):
    """Soft-core pair potential used to label the synthetic molecules."""
    diff = pos[:, None, :] - pos[None, :, :]
    r = torch.sqrt((diff ** 2).sum(-1) + 0.5)
    eps = 0.2 + 0.1 * (z[:, None] + z[None, :]).float()
    pair = eps * ((1.0 / r) ** 6 - 2 * (1.0 / r) ** 3) + 0.5 * charge[:, None] * charge[None, :] / r
    return (pair * (1 - torch.eye(len(pos)))).sum() / 2


def make_molecule(rng, cfg):
    n = int(rng.integers(5, 9))
    pos = torch.tensor(rng.normal(0, 1.0, (n, 3)))
    z = torch.tensor(rng.integers(0, cfg.n_elements, n))
    charge = torch.tensor(rng.normal(0, 0.3, n))
    pos_req = pos.clone().requires_grad_(True)
    energy = reference_potential(pos_req, z, charge)
    forces = -torch.autograd.grad(energy, pos_req)[0]
    dist = torch.cdist(pos, pos)
    src, dst = torch.nonzero((dist < cfg.cutoff) & (dist > 0), as_tuple=True)
    g = Graph(src, dst, n)
    g.ndata["x"] = torch.cat([pos, charge[:, None]], 1)
    g.ndata["z"] = z
    g.ndata["forces"] = forces.float()
    return g, energy.item()


class MoleculeDataset:
    def __init__(self, n, rng, cfg):
        self.items = [make_molecule(rng, cfg) for _ in range(n)]

    def loader(self, batch_size, shuffle):
        order = np.random.permutation(len(self.items)) if shuffle else np.arange(len(self.items))
        for i in range(0, len(order), batch_size):
            chunk = [self.items[j] for j in order[i:i + batch_size]]
            yield batch([c[0] for c in chunk]), torch.tensor([c[1] for c in chunk], dtype=torch.float32)


class Trainer:
    def __init__(self, model, cfg, callbacks=()):
        self.model, self.cfg = model, cfg
        self.optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
        self.scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(self.optimizer, factor=0.5, patience=1)
        self.callbacks = list(callbacks)
        self.mse = nn.MSELoss()

    def _inputs(self, G):
        feat = G.ndata["x"].to(device, torch.float32)
        feat.requires_grad = True
        return feat

    def train_step(self, G, energy):
        self.model.train()
        feat = self._inputs(G)
        pred_e, pred_f = self.model(G, feat)
        loss = (self.cfg.energy_weight * self.mse(pred_e, energy)
                + self.cfg.force_weight * self.mse(pred_f, G.ndata["forces"]))
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def evaluate(self, dataset):
        self.model.eval()
        e_err, f_err = [], []
        for G, energy in dataset.loader(self.cfg.batch_size, shuffle=False):
            pred_e, pred_f = self.model(G, self._inputs(G))
            e_err.append((pred_e - energy).abs().mean().item())
            f_err.append((pred_f - G.ndata["forces"]).abs().mean().item())
        return {"energy_mae": float(np.mean(e_err)), "force_mae": float(np.mean(f_err))}

    def fit(self, train_set, val_set):
        for epoch in range(self.cfg.epochs):
            losses = [self.train_step(G, e) for G, e in train_set.loader(self.cfg.batch_size, shuffle=True)]
            metrics = self.evaluate(val_set)
            self.scheduler.step(metrics["force_mae"])
            for cb in self.callbacks:
                cb(epoch, float(np.mean(losses)), metrics)


def main():
    cfg = Config()
    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    train_set, val_set = MoleculeDataset(cfg.n_train, rng, cfg), MoleculeDataset(cfg.n_val, rng, cfg)
    model = EnergyForceModel(cfg).to(device)
    log = lambda epoch, loss, m: print(f"epoch {epoch} loss {loss:.4f} "
                                       f"E-MAE {m['energy_mae']:.4f} F-MAE {m['force_mae']:.4f}")
    Trainer(model, cfg, callbacks=[log]).fit(train_set, val_set)


if __name__ == "__main__":
    main()
