# expect: clean
# source: https://github.com/XieResearchGroup/Physics-aware-Multiplex-GNN/issues/4
"""Physics-aware multiplex GNN (PAMNet-style) for molecular property regression.

Follows the project layout: a config namespace, DimeNet-style radial basis
(Envelope + BesselBasisLayer with learnable frequencies and reset_parameters()),
a radius-graph helper, local and global message-passing layers, a PAMNet model
that sums atom-wise outputs into a molecular prediction, exponential moving
average of weights, a Runner with train_epoch / evaluate, warmup + plateau LR
scheduling and early stopping.  Random small "molecules" (atom types and 3D
coordinates) with a synthetic energy target, CPU only.
"""
import copy
import math
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

PI = math.pi


class Envelope(nn.Module):
    def __init__(self, exponent):
        super().__init__()
        self.p = exponent + 1
        self.a = -(self.p + 1) * (self.p + 2) / 2
        self.b = self.p * (self.p + 2)
        self.c = -self.p * (self.p + 1) / 2

    def forward(self, x):
        p, a, b, c = self.p, self.a, self.b, self.c
        x_pow_p0 = x.pow(p - 1)
        x_pow_p1 = x_pow_p0 * x
        x_pow_p2 = x_pow_p1 * x
        return (1.0 / x + a * x_pow_p0 + b * x_pow_p1 + c * x_pow_p2) * (x < 1.0).to(x.dtype)


class BesselBasisLayer(nn.Module):
    def __init__(self, num_radial, cutoff=5.0, envelope_exponent=5):
        super().__init__()
        self.cutoff = cutoff
        self.envelope = Envelope(envelope_exponent)
        self.freq = nn.Parameter(torch.Tensor(num_radial))
        self.reset_parameters()

    def reset_parameters(self):
        with torch.no_grad():
            freq = torch.arange(1, self.freq.numel() + 1, dtype=self.freq.dtype)
            self.freq.copy_(freq).mul_(PI)
        self.freq.requires_grad_()

    def forward(self, dist):
        dist = dist.unsqueeze(-1) / self.cutoff
        return self.envelope(dist) * torch.sin(self.freq * dist)


def radius_graph(pos, batch, cutoff):
    """All ordered pairs (i, j), i != j, in the same molecule and within the cutoff."""
    same = batch[:, None] == batch[None, :]
    dist = torch.cdist(pos, pos)
    mask = same & (dist < cutoff) & ~torch.eye(pos.size(0), dtype=torch.bool)
    row, col = mask.nonzero(as_tuple=True)
    return torch.stack([row, col], dim=0)


def scatter_sum(src, index, dim_size):
    out = torch.zeros(dim_size, src.size(-1), dtype=src.dtype)
    return out.index_add(0, index, src)


class MessagePassingLayer(nn.Module):
    def __init__(self, dim, num_radial):
        super().__init__()
        self.lin_rbf = nn.Linear(num_radial, dim, bias=False)
        self.mlp_msg = nn.Sequential(nn.Linear(2 * dim, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.mlp_upd = nn.Sequential(nn.Linear(2 * dim, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.out = nn.Linear(dim, 1)

    def reset_parameters(self):
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, h, rbf, edge_index):
        row, col = edge_index
        msg = self.mlp_msg(torch.cat([h[row], h[col]], dim=-1)) * self.lin_rbf(rbf)
        agg = scatter_sum(msg, col, h.size(0))
        h = h + self.mlp_upd(torch.cat([h, agg], dim=-1))
        return h, self.out(h)


class PAMNet(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embeddings = nn.Embedding(config.num_atom_types, config.dim)
        self.rbf_g = BesselBasisLayer(config.num_radial, config.cutoff_g, config.envelope_exponent)
        self.rbf_l = BesselBasisLayer(config.num_radial, config.cutoff_l, config.envelope_exponent)
        self.global_layers = nn.ModuleList([MessagePassingLayer(config.dim, config.num_radial)
                                            for _ in range(config.n_layer)])
        self.local_layers = nn.ModuleList([MessagePassingLayer(config.dim, config.num_radial)
                                           for _ in range(config.n_layer)])
        self.attn = nn.Parameter(torch.ones(2 * config.n_layer))

    def reset_parameters(self):
        self.rbf_g.reset_parameters()
        self.rbf_l.reset_parameters()
        for layer in list(self.global_layers) + list(self.local_layers):
            layer.reset_parameters()

    def forward(self, data):
        pos, batch = data.pos, data.batch
        h = self.embeddings(data.x)
        ei_g = radius_graph(pos, batch, self.config.cutoff_g)
        ei_l = radius_graph(pos, batch, self.config.cutoff_l)
        dist_g = (pos[ei_g[0]] - pos[ei_g[1]]).norm(dim=-1)
        dist_l = (pos[ei_l[0]] - pos[ei_l[1]]).norm(dim=-1)
        rbf_g, rbf_l = self.rbf_g(dist_g), self.rbf_l(dist_l)
        outs = []
        for glob, loc in zip(self.global_layers, self.local_layers):
            h, out_g = glob(h, rbf_g, ei_g)
            h, out_l = loc(h, rbf_l, ei_l)
            outs += [out_g, out_l]
        att = torch.softmax(self.attn, dim=0)
        node_out = sum(a * o for a, o in zip(att, outs))
        return scatter_sum(node_out, batch, int(batch.max()) + 1).squeeze(-1)


class EMA:
    def __init__(self, model, decay):
        self.decay = decay
        self.shadow = copy.deepcopy(model.state_dict())

    @torch.no_grad()
    def update(self, model):
        for k, v in model.state_dict().items():
            if v.dtype.is_floating_point:
                self.shadow[k].mul_(self.decay).add_(v, alpha=1 - self.decay)


def make_molecules(n_mol, config, gen):
    xs, poss, batches, ys = [], [], [], []
    for m in range(n_mol):
        n_atoms = int(torch.randint(4, 8, (1,), generator=gen))
        x = torch.randint(0, config.num_atom_types, (n_atoms,), generator=gen)
        pos = torch.randn(n_atoms, 3, generator=gen) * 1.2
        xs.append(x); poss.append(pos); batches.append(torch.full((n_atoms,), m))
        ys.append((1.0 / (torch.pdist(pos) + 0.5)).sum() * 0.1 + x.float().mean())
    return SimpleNamespace(x=torch.cat(xs), pos=torch.cat(poss), batch=torch.cat(batches), y=torch.stack(ys))


class Runner:
    def __init__(self, config):
        self.config = config
        self.model = PAMNet(config)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.lr, weight_decay=config.wd)
        self.warmup = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda e: min(1.0, (e + 1) / 2))
        self.plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(self.optimizer, factor=0.5, patience=1)
        self.ema = EMA(self.model, config.ema_decay)
        self.gen = torch.Generator().manual_seed(config.seed)
        self.best, self.bad_epochs = float("inf"), 0

    def train_epoch(self):
        self.model.train()
        total = 0.0
        for _ in range(self.config.batches_per_epoch):
            data = make_molecules(self.config.batch_size, self.config, self.gen)
            loss = F.l1_loss(self.model(data), data.y)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            self.ema.update(self.model)
            total += loss.item()
        return total / self.config.batches_per_epoch

    @torch.no_grad()
    def evaluate(self):
        self.model.eval()
        data = make_molecules(self.config.batch_size, self.config, self.gen)
        return F.l1_loss(self.model(data), data.y).item()

    def fit(self):
        for epoch in range(self.config.epochs):
            train_mae = self.train_epoch()
            val_mae = self.evaluate()
            self.warmup.step() if epoch < 2 else self.plateau.step(val_mae)
            print("epoch %d train MAE %.4f val MAE %.4f" % (epoch, train_mae, val_mae))
            if val_mae < self.best:
                self.best, self.bad_epochs = val_mae, 0
            else:
                self.bad_epochs += 1
                if self.bad_epochs >= self.config.patience:
                    break


def main():
    config = SimpleNamespace(num_atom_types=5, dim=16, num_radial=8, n_layer=2, cutoff_g=5.0, cutoff_l=2.0,
                             envelope_exponent=5, lr=1e-3, wd=0.0, ema_decay=0.99, epochs=3,
                             batches_per_epoch=2, batch_size=4, patience=3, seed=0)
    torch.manual_seed(config.seed)
    Runner(config).fit()


if __name__ == "__main__":
    main()
