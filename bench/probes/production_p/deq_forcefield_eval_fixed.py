# expect: clean
# source: https://github.com/locuslab/torchdeq/issues/4
"""Deep-equilibrium interatomic potential: energies from a fixed-point atom
representation, forces as -dE/dpos (torchdeq-style DEQ layer, condensed).

Training uses phantom gradients on the solver trajectory; evaluation reports
energy/force MAE on held-out conformations.
"""
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)


@dataclass
class DEQArgs:
    f_solver: str = "anderson"
    f_max_iter: int = 24
    f_tol: float = 1e-4
    eval_f_max_iter: int = 32
    grad: int = 2          # phantom gradient steps
    tau: float = 0.8
    n_states: int = 1


# ---------------------------------------------------------------- solvers
def fixed_point_iter(func, x0, max_iter=24, tol=1e-4, **kwargs):
    x, trajectory = x0, []
    for k in range(max_iter):
        fx = func(x)
        res = (fx - x).norm() / (fx.norm() + 1e-8)
        x = fx
        trajectory.append(x)
        if res < tol:
            break
    return x, trajectory, {"rel_lowest": res.item(), "nstep": k + 1}


def anderson_solver(func, x0, max_iter=24, tol=1e-4, m=4, lam=1e-4, beta=1.0, **kwargs):
    shape = x0.shape
    x0 = x0.reshape(1, -1)
    d = x0.shape[1]
    X = torch.zeros(1, m, d)
    Fv = torch.zeros(1, m, d)
    X[:, 0], Fv[:, 0] = x0, func(x0.view(shape)).reshape(1, -1)
    X[:, 1], Fv[:, 1] = Fv[:, 0], func(Fv[:, 0].view(shape)).reshape(1, -1)
    H = torch.zeros(1, m + 1, m + 1)
    H[:, 0, 1:] = H[:, 1:, 0] = 1
    y = torch.zeros(1, m + 1, 1)
    y[:, 0] = 1
    trajectory, res = [], float("inf")
    for k in range(2, max_iter):
        n = min(k, m)
        G = Fv[:, :n] - X[:, :n]
        H[:, 1:n + 1, 1:n + 1] = torch.bmm(G, G.transpose(1, 2)) + lam * torch.eye(n)[None]
        alpha = torch.linalg.solve(H[:, :n + 1, :n + 1], y[:, :n + 1])[:, 1:n + 1, 0]
        X[:, k % m] = beta * (alpha[:, None] @ Fv[:, :n])[:, 0] + (1 - beta) * (alpha[:, None] @ X[:, :n])[:, 0]
        Fv[:, k % m] = func(X[:, k % m].view(shape)).reshape(1, -1)
        res = ((Fv[:, k % m] - X[:, k % m]).norm() / (1e-5 + Fv[:, k % m].norm())).item()
        trajectory.append(X[:, k % m].view(shape))
        if res < tol:
            break
    return X[:, k % m].view(shape), trajectory, {"rel_lowest": res, "nstep": k + 1}


SOLVERS = {"anderson": anderson_solver, "fixed_point_iter": fixed_point_iter}


# ---------------------------------------------------------------- DEQ layer
class DEQIndexing(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.args = args
        self.f_solver = SOLVERS[args.f_solver]

    def _solve_fixed_point(self, func, z_init, f_max_iter):
        with torch.no_grad():
            return self.f_solver(func, z_init, max_iter=f_max_iter, tol=self.args.f_tol)

    def _phantom_grad(self, func, z_pred):
        z = z_pred
        for _ in range(self.args.grad):
            z = (1 - self.args.tau) * z + self.args.tau * func(z)
        return z

    def forward(self, func, z_init):
        if self.training:
            z_star, trajectory, info = self._solve_fixed_point(func, z_init, self.args.f_max_iter)
            z_out = [self._phantom_grad(func, z_star)]
        else:
            z_star, _, info = self._solve_fixed_point(func, z_init, self.args.eval_f_max_iter)
            # re-engage the autograd tape at the fixed point so that outputs stay
            # differentiable w.r.t. the layer inputs (e.g. positions) in eval mode
            z_out = [func(z_star)]
        return z_out, info


def get_deq(args):
    return DEQIndexing(args)


# ---------------------------------------------------------------- model
class GaussianRBF(nn.Module):
    def __init__(self, n_rbf=16, cutoff=4.0):
        super().__init__()
        self.register_buffer("centers", torch.linspace(0, cutoff, n_rbf))
        self.gamma = 10.0 / cutoff
        self.cutoff = cutoff

    def forward(self, d):
        env = 0.5 * (torch.cos(np.pi * d / self.cutoff) + 1) * (d < self.cutoff)
        return torch.exp(-self.gamma * (d.unsqueeze(-1) - self.centers) ** 2) * env.unsqueeze(-1)


class DEQPotential(nn.Module):
    def __init__(self, n_types=4, hidden=32, n_rbf=16, cutoff=4.0, deq_args=None):
        super().__init__()
        self.embed = nn.Embedding(n_types, hidden)
        self.rbf = GaussianRBF(n_rbf, cutoff)
        self.filter = nn.Sequential(nn.Linear(n_rbf, hidden), nn.SiLU(), nn.Linear(hidden, hidden))
        self.self_lin = nn.Linear(hidden, hidden, bias=False)
        self.msg_lin = nn.Linear(hidden, hidden, bias=False)
        self.norm = nn.LayerNorm(hidden)
        self.energy_head = nn.Sequential(nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, 1))
        self.deq = get_deq(deq_args or DEQArgs())
        nn.init.normal_(self.self_lin.weight, std=0.3 / hidden ** 0.5)
        nn.init.normal_(self.msg_lin.weight, std=0.3 / hidden ** 0.5)

    def implicit_layer(self, z, inj, W_ij, src, dst):
        msg = torch.zeros_like(z).index_add_(0, dst, self.msg_lin(z)[src] * W_ij)
        return self.norm(torch.tanh(self.self_lin(z) + msg + inj))

    def forward(self, atom_types, pos, batch, num_graphs):
        n = pos.size(0)
        same = batch[:, None] == batch[None, :]
        src, dst = (same & ~torch.eye(n, dtype=torch.bool)).nonzero(as_tuple=True)
        dist = (pos[src] - pos[dst]).norm(dim=-1)
        W_ij = self.filter(self.rbf(dist))
        inj = self.embed(atom_types)
        func = lambda z: self.implicit_layer(z, inj, W_ij, src, dst)
        z_pred, info = self.deq(func, torch.zeros_like(inj))
        atom_e = self.energy_head(z_pred[-1]).squeeze(-1)
        energy = torch.zeros(num_graphs).index_add(0, batch, atom_e)
        forces = -torch.autograd.grad(energy.sum(), pos, create_graph=self.training)[0]
        return energy, forces, info


# ---------------------------------------------------------------- data
def reference_potential(types, pos, batch, num_graphs):
    n = pos.size(0)
    same = (batch[:, None] == batch[None, :]) & ~torch.eye(n, dtype=torch.bool)
    d = torch.cdist(pos, pos)[same]
    r0 = 1.0 + 0.1 * (types[:, None] + types[None, :]).float()[same]
    e_pair = 0.5 * (torch.exp(-2 * (d - r0)) - 2 * torch.exp(-(d - r0)))
    pair_batch = batch[:, None].expand(n, n)[same]
    return torch.zeros(num_graphs).index_add(0, pair_batch, e_pair)


def make_split(n_mol, n_atoms, rng):
    types = torch.tensor(rng.randint(0, 4, size=(n_mol, n_atoms))).view(-1)
    pos = torch.tensor(rng.randn(n_mol, n_atoms, 3) * 0.9, dtype=torch.float32).view(-1, 3)
    batch = torch.arange(n_mol).repeat_interleave(n_atoms)
    pos.requires_grad_(True)
    e = reference_potential(types, pos, batch, n_mol)
    f = -torch.autograd.grad(e.sum(), pos)[0]
    return types, pos.detach(), batch, e.detach(), f.detach()


def batches(split, mols_per_batch, n_atoms):
    types, pos, batch, e, f = split
    n_mol = e.numel()
    for s in range(0, n_mol, mols_per_batch):
        a, b = s * n_atoms, min(n_mol, s + mols_per_batch) * n_atoms
        yield types[a:b], pos[a:b].clone(), batch[a:b] - s, e[s:s + mols_per_batch], f[a:b]


def evaluate(model, split, n_atoms):
    """Energy/force MAE; only dE/dpos is needed, so the weights are frozen here."""
    model.eval()
    model.requires_grad_(False)
    e_mae, f_mae, count = 0.0, 0.0, 0
    for types, pos, batch, e, f in batches(split, 8, n_atoms):
        pos.requires_grad_(True)
        energy, forces, _ = model(types, pos, batch, e.numel())
        e_mae += (energy - e).abs().sum().item()
        f_mae += (forces - f).abs().mean().item() * e.numel()
        count += e.numel()
    model.requires_grad_(True)
    model.train()
    return e_mae / count, f_mae / count


def main():
    rng = np.random.RandomState(0)
    n_atoms = 5
    train_split, val_split = make_split(48, n_atoms, rng), make_split(16, n_atoms, rng)
    model = DEQPotential(deq_args=DEQArgs())
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-5)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=12)
    energy_coef, force_coef = 1.0, 10.0
    for epoch in range(3):
        model.train()
        for step, (types, pos, batch, e, f) in enumerate(batches(train_split, 8, n_atoms)):
            pos.requires_grad_(True)
            energy, forces, info = model(types, pos, batch, e.numel())
            loss = energy_coef * F.mse_loss(energy, e) + force_coef * F.mse_loss(forces, f)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
            optimizer.step()
            scheduler.step()
        e_mae, f_mae = evaluate(model, val_split, n_atoms)
        print(f"epoch {epoch}: loss {loss.item():.4f} nstep {info['nstep']} "
              f"val energy MAE {e_mae:.4f} force MAE {f_mae:.4f}")


main()
