# expect: clean
# source: https://github.com/pyg-team/pytorch_geometric/pull/4424
"""DimeNet on small synthetic 3D molecules (energy regression): Bessel radial basis,
angular basis over edge triplets, interaction blocks mixing k->j into j->i messages."""
import argparse
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

PI = math.pi

torch.manual_seed(0)
np.random.seed(0)


def swish(x):
    return x * x.sigmoid()


class Envelope(nn.Module):
    def __init__(self, exponent):
        super().__init__()
        self.p = exponent + 1
        self.a = -(self.p + 1) * (self.p + 2) / 2
        self.b = self.p * (self.p + 2)
        self.c = -self.p * (self.p + 1) / 2

    def forward(self, x):
        a, b, c = self.a, self.b, self.c
        x_pow_p0 = x.pow(self.p - 1)
        x_pow_p1 = x_pow_p0 * x
        x_pow_p2 = x_pow_p1 * x
        return (1. / x + a * x_pow_p0 + b * x_pow_p1 + c * x_pow_p2) * (x < 1.0).to(x.dtype)


class BesselBasisLayer(nn.Module):
    def __init__(self, num_radial, cutoff=5.0, envelope_exponent=5):
        super().__init__()
        self.cutoff = cutoff
        self.envelope = Envelope(envelope_exponent)
        self.freq = nn.Parameter(torch.Tensor(num_radial))
        self.reset_parameters()

    def reset_parameters(self):
        with torch.no_grad():
            self.freq.copy_(torch.arange(1, self.freq.numel() + 1)).mul_(PI)

    def forward(self, dist):
        dist = dist.unsqueeze(-1) / self.cutoff
        return self.envelope(dist) * (self.freq * dist).sin()


class SphericalBasisLayer(nn.Module):
    """Radial sine basis times a cosine series in the triplet angle."""

    def __init__(self, num_spherical, num_radial, cutoff=5.0, envelope_exponent=5):
        super().__init__()
        self.num_spherical = num_spherical
        self.num_radial = num_radial
        self.cutoff = cutoff
        self.envelope = Envelope(envelope_exponent)
        self.register_buffer("zeros", torch.arange(1, num_radial + 1).float() * PI)

    def forward(self, dist, angle, idx_kj):
        dist = dist / self.cutoff
        rbf = torch.sin(dist.unsqueeze(-1) * self.zeros) / dist.unsqueeze(-1)
        rbf = self.envelope(dist).unsqueeze(-1) * rbf
        cbf = torch.stack([torch.cos(l * angle) for l in range(self.num_spherical)], dim=1)
        n, k = self.num_spherical, self.num_radial
        return (rbf[idx_kj].view(-1, 1, k) * cbf.view(-1, n, 1)).view(-1, n * k)


class EmbeddingBlock(nn.Module):
    def __init__(self, num_radial, hidden_channels, act=swish):
        super().__init__()
        self.act = act
        self.emb = nn.Embedding(95, hidden_channels)
        self.lin_rbf = nn.Linear(num_radial, hidden_channels)
        self.lin = nn.Linear(3 * hidden_channels, hidden_channels)

    def reset_parameters(self):
        self.emb.weight.data.uniform_(-math.sqrt(3), math.sqrt(3))
        self.lin_rbf.reset_parameters()
        self.lin.reset_parameters()

    def forward(self, x, rbf, i, j):
        x = self.emb(x)
        rbf = self.act(self.lin_rbf(rbf))
        return self.act(self.lin(torch.cat([x[i], x[j], rbf], dim=-1)))


class ResidualLayer(nn.Module):
    def __init__(self, hidden_channels, act=swish):
        super().__init__()
        self.act = act
        self.lin1 = nn.Linear(hidden_channels, hidden_channels)
        self.lin2 = nn.Linear(hidden_channels, hidden_channels)

    def reset_parameters(self):
        nn.init.orthogonal_(self.lin1.weight)
        self.lin1.bias.data.fill_(0)
        nn.init.orthogonal_(self.lin2.weight)
        self.lin2.bias.data.fill_(0)

    def forward(self, x):
        return x + self.act(self.lin2(self.act(self.lin1(x))))


class InteractionBlock(nn.Module):
    def __init__(self, hidden_channels, num_bilinear, num_spherical, num_radial,
                 num_before_skip, num_after_skip, act=swish):
        super().__init__()
        self.act = act
        self.lin_rbf = nn.Linear(num_radial, hidden_channels, bias=False)
        self.lin_sbf = nn.Linear(num_spherical * num_radial, num_bilinear, bias=False)
        self.lin_kj = nn.Linear(hidden_channels, hidden_channels)
        self.lin_ji = nn.Linear(hidden_channels, hidden_channels)
        self.W = nn.Parameter(torch.Tensor(hidden_channels, num_bilinear, hidden_channels))
        self.layers_before_skip = nn.ModuleList([ResidualLayer(hidden_channels, act) for _ in range(num_before_skip)])
        self.lin = nn.Linear(hidden_channels, hidden_channels)
        self.layers_after_skip = nn.ModuleList([ResidualLayer(hidden_channels, act) for _ in range(num_after_skip)])

    def reset_parameters(self):
        for lin in (self.lin_rbf, self.lin_sbf, self.lin_kj, self.lin_ji, self.lin):
            nn.init.orthogonal_(lin.weight)
            if lin.bias is not None:
                lin.bias.data.fill_(0)
        self.W.data.normal_(mean=0, std=2 / self.W.size(0))
        for res_layer in self.layers_before_skip:
            res_layer.reset_parameters()
        for res_layer in self.layers_after_skip:
            res_layer.reset_parameters()

    def forward(self, x, rbf, sbf, idx_kj, idx_ji):
        rbf = self.lin_rbf(rbf)
        sbf = self.lin_sbf(sbf)
        x_ji = self.act(self.lin_ji(x))
        x_kj = self.act(self.lin_kj(x))
        x_kj = x_kj * rbf
        x_kj = torch.einsum('wj,wl,ijl->wi', sbf, x_kj[idx_kj], self.W)
        agg = torch.zeros_like(x).index_add_(0, idx_ji, x_kj)
        h = x_ji + agg
        for layer in self.layers_before_skip:
            h = layer(h)
        h = self.act(self.lin(h)) + x
        for layer in self.layers_after_skip:
            h = layer(h)
        return h


class OutputBlock(nn.Module):
    def __init__(self, num_radial, hidden_channels, out_channels, num_layers, act=swish):
        super().__init__()
        self.act = act
        self.lin_rbf = nn.Linear(num_radial, hidden_channels, bias=False)
        self.lins = nn.ModuleList([nn.Linear(hidden_channels, hidden_channels) for _ in range(num_layers)])
        self.lin = nn.Linear(hidden_channels, out_channels, bias=False)

    def reset_parameters(self):
        nn.init.orthogonal_(self.lin_rbf.weight)
        for lin in self.lins:
            nn.init.orthogonal_(lin.weight)
            lin.bias.data.fill_(0)
        self.lin.weight.data.fill_(0)

    def forward(self, x, rbf, i, num_nodes):
        x = self.lin_rbf(rbf) * x
        x = torch.zeros(num_nodes, x.size(-1)).index_add_(0, i, x)
        for lin in self.lins:
            x = self.act(lin(x))
        return self.lin(x)


def radius_graph(pos, r, batch):
    d = torch.cdist(pos, pos)
    same = batch.view(-1, 1) == batch.view(1, -1)
    mask = (d < r) & same & ~torch.eye(pos.size(0), dtype=torch.bool)
    row, col = mask.nonzero(as_tuple=True)
    return torch.stack([row, col], dim=0)


def triplets(edge_index, num_nodes):
    row, col = edge_index  # j -> i
    idx_kj, idx_ji = [], []
    incoming = [[] for _ in range(num_nodes)]
    for e, (j, i) in enumerate(zip(row.tolist(), col.tolist())):
        incoming[i].append((j, e))
    for e_ji, (j, i) in enumerate(zip(row.tolist(), col.tolist())):
        for k, e_kj in incoming[j]:
            if k != i:
                idx_kj.append(e_kj)
                idx_ji.append(e_ji)
    idx_kj = torch.tensor(idx_kj, dtype=torch.long)
    idx_ji = torch.tensor(idx_ji, dtype=torch.long)
    return col, row, row[idx_kj], col[idx_kj], idx_kj, idx_ji


class DimeNet(nn.Module):
    def __init__(self, hidden_channels, out_channels, num_blocks, num_bilinear, num_spherical,
                 num_radial, cutoff=5.0, envelope_exponent=5, num_before_skip=1,
                 num_after_skip=2, num_output_layers=3):
        super().__init__()
        self.cutoff = cutoff
        self.num_blocks = num_blocks
        self.rbf = BesselBasisLayer(num_radial, cutoff, envelope_exponent)
        self.sbf = SphericalBasisLayer(num_spherical, num_radial, cutoff, envelope_exponent)
        self.emb = EmbeddingBlock(num_radial, hidden_channels)
        self.output_blocks = nn.ModuleList([
            OutputBlock(num_radial, hidden_channels, out_channels, num_output_layers)
            for _ in range(num_blocks + 1)])
        self.interaction_blocks = nn.ModuleList([
            InteractionBlock(hidden_channels, num_bilinear, num_spherical, num_radial,
                             num_before_skip, num_after_skip) for _ in range(num_blocks)])
        self.reset_parameters()

    def reset_parameters(self):
        self.rbf.reset_parameters()
        self.emb.reset_parameters()
        for out in self.output_blocks:
            out.reset_parameters()
        for interaction in self.interaction_blocks:
            interaction.reset_parameters()

    def forward(self, z, pos, batch):
        edge_index = radius_graph(pos, r=self.cutoff, batch=batch)
        i, j, idx_i, idx_k, idx_kj, idx_ji = triplets(edge_index, z.size(0))
        dist = (pos[i] - pos[j]).pow(2).sum(dim=-1).sqrt()
        pos_ji = pos[i[idx_ji]] - pos[j[idx_ji]]
        pos_kj = pos[j[idx_kj]] - pos[i[idx_kj]]
        a = (pos_ji * pos_kj).sum(dim=-1)
        b = torch.cross(pos_ji, pos_kj, dim=-1).norm(dim=-1)
        angle = torch.atan2(b, a)
        rbf = self.rbf(dist)
        sbf = self.sbf(dist, angle, idx_kj)
        x = self.emb(z, rbf, i, j)
        P = self.output_blocks[0](x, rbf, i, num_nodes=pos.size(0))
        for interaction_block, output_block in zip(self.interaction_blocks, self.output_blocks[1:]):
            x = interaction_block(x, rbf, sbf, idx_kj, idx_ji)
            P = P + output_block(x, rbf, i, num_nodes=pos.size(0))
        num_graphs = int(batch.max()) + 1
        return torch.zeros(num_graphs, P.size(-1)).index_add_(0, batch, P)


def make_molecules(n, rng):
    mols = []
    for _ in range(n):
        na = rng.randint(4, 8)
        z = rng.randint(1, 5, size=na)
        pos = rng.randn(na, 3) * 1.1
        d = np.linalg.norm(pos[:, None] - pos[None], axis=-1) + np.eye(na)
        e = np.sum(np.triu(np.exp(-2 * (d - 1.2)) - 2 * np.exp(-(d - 1.2)), 1)) * 0.1
        mols.append((torch.tensor(z), torch.tensor(pos, dtype=torch.float32), float(e)))
    return mols


def collate(mols):
    z = torch.cat([m[0] for m in mols])
    pos = torch.cat([m[1] for m in mols])
    batch = torch.cat([torch.full((m[0].numel(),), k, dtype=torch.long) for k, m in enumerate(mols)])
    y = torch.tensor([m[2] for m in mols]).view(-1, 1)
    return z, pos, batch, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--blocks", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch_size", type=int, default=8)
    args = parser.parse_args([])
    rng = np.random.RandomState(0)
    train, val = make_molecules(48, rng), make_molecules(16, rng)
    model = DimeNet(hidden_channels=args.hidden, out_channels=1, num_blocks=args.blocks,
                    num_bilinear=8, num_spherical=4, num_radial=6, cutoff=3.0)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, amsgrad=True)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10) * 0.96 ** (s / 20))
    for epoch in range(args.epochs):
        model.train()
        perm = rng.permutation(len(train))
        for s in range(0, len(train), args.batch_size):
            z, pos, batch, y = collate([train[k] for k in perm[s:s + args.batch_size]])
            loss = F.l1_loss(model(z, pos, batch), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        model.eval()
        with torch.no_grad():
            z, pos, batch, y = collate(val)
            mae = (model(z, pos, batch) - y).abs().mean().item()
        print(f"epoch {epoch} train_l1 {loss.item():.4f} val_mae {mae:.4f} "
              f"freq[0]/pi {model.rbf.freq[0].item() / PI:.3f}")


main()
