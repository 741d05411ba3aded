# expect: freed_graph
# source: https://github.com/lab-cosmo/torch-pme/issues/62
"""Machine-learned charge model with an Ewald long-range term.

A small network predicts per-atom partial charges from a radial descriptor;
the electrostatic energy is evaluated with an Ewald sum (real + reciprocal
space).  Energies, forces and stresses of a synthetic constant-volume ionic
trajectory are fitted.  The calculator keeps the reciprocal lattice vectors of
the last cell so that repeated calls in the same box skip the k-grid setup.
"""
import argparse
import math

import numpy as np
import torch
import torch.nn as nn


def get_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--n-atoms", type=int, default=12)
    p.add_argument("--box", type=float, default=6.0)
    p.add_argument("--n-frames", type=int, default=6)
    p.add_argument("--smearing", type=float, default=1.0)
    p.add_argument("--nmax", type=int, default=2)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--w-force", type=float, default=0.5)
    p.add_argument("--w-stress", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=3)
    return p.parse_args(argv)


def integer_grid(nmax):
    r = torch.arange(-nmax, nmax + 1, dtype=torch.float64)
    ns = torch.cartesian_prod(r, r, r)
    return ns[(ns != 0).any(dim=1)]


def reciprocal_kvectors(cell, ns):
    recip = 2 * math.pi * torch.linalg.inv(cell).T
    return ns @ recip


def minimum_image(positions, cell):
    frac = positions @ torch.linalg.inv(cell)
    dfrac = frac[:, None, :] - frac[None, :, :]
    dfrac = dfrac - torch.round(dfrac.detach())
    return dfrac @ cell


def ewald_energy(positions, charges, cell, kvectors, smearing):
    n = positions.shape[0]
    volume = torch.linalg.det(cell).abs()
    # reciprocal space
    k2 = (kvectors ** 2).sum(dim=-1)
    kernel = torch.exp(-0.5 * smearing ** 2 * k2) / k2
    phase = positions @ kvectors.T
    s_re = (charges[:, None] * torch.cos(phase)).sum(dim=0)
    s_im = (charges[:, None] * torch.sin(phase)).sum(dim=0)
    e_recip = (2 * math.pi / volume) * (kernel * (s_re ** 2 + s_im ** 2)).sum()
    # real space (minimum image, no double counting)
    rij = minimum_image(positions, cell)
    iu = torch.triu_indices(n, n, offset=1)
    d = rij[iu[0], iu[1]].norm(dim=-1)
    qq = charges[iu[0]] * charges[iu[1]]
    e_real = (qq * torch.erfc(d / (math.sqrt(2) * smearing)) / d).sum()
    e_self = -(charges ** 2).sum() / (math.sqrt(2 * math.pi) * smearing)
    return e_recip + e_real + e_self


class EwaldCalculator(nn.Module):
    def __init__(self, smearing, nmax):
        super().__init__()
        self.smearing = smearing
        self.register_buffer("ns", integer_grid(nmax))
        self._cached_cell = None
        self._cached_kvectors = None

    def _get_kvectors(self, cell):
        if self._cached_cell is not None and torch.equal(cell.detach(), self._cached_cell):
            return self._cached_kvectors
        kvectors = reciprocal_kvectors(cell, self.ns)
        self._cached_cell = cell.detach().clone()
        self._cached_kvectors = kvectors
        return kvectors

    def forward(self, positions, charges, cell):
        kvectors = self._get_kvectors(cell)
        return ewald_energy(positions, charges, cell, kvectors, self.smearing)


class RadialDescriptor(nn.Module):
    def __init__(self, n_basis=8, r_cut=3.0):
        super().__init__()
        self.register_buffer("centers", torch.linspace(0.5, r_cut, n_basis, dtype=torch.float64))
        self.width = r_cut / n_basis
        self.r_cut = r_cut

    def forward(self, positions, cell):
        rij = minimum_image(positions, cell)
        d = (rij ** 2).sum(-1).add(1e-12).sqrt()
        n = d.shape[0]
        d = d + torch.eye(n, dtype=d.dtype) * 10 * self.r_cut
        fc = 0.5 * (torch.cos(math.pi * d / self.r_cut) + 1) * (d < self.r_cut)
        g = torch.exp(-((d[..., None] - self.centers) / self.width) ** 2)
        return (g * fc[..., None]).sum(dim=1)


class ChargeEquilibrationModel(nn.Module):
    def __init__(self, n_species, args):
        super().__init__()
        self.descriptor = RadialDescriptor()
        self.species_emb = nn.Embedding(n_species, 8)
        self.charge_net = nn.Sequential(nn.Linear(16, 32), nn.SiLU(), nn.Linear(32, 1))
        self.short_range = nn.Sequential(nn.Linear(16, 32), nn.SiLU(), nn.Linear(32, 1))
        self.calculator = EwaldCalculator(args.smearing, args.nmax)
        self.double()

    def forward(self, positions, species, cell):
        feats = torch.cat([self.descriptor(positions, cell), self.species_emb(species)], dim=-1)
        q = self.charge_net(feats).squeeze(-1)
        q = q - q.mean()  # keep the cell neutral
        e_sr = self.short_range(feats).sum()
        return self.calculator(positions, q, cell) + e_sr, q


def energy_forces_stress(model, positions, species, cell, create_graph):
    positions = positions.clone().requires_grad_(True)
    cell = cell.clone().requires_grad_(True)
    energy, charges = model(positions, species, cell)
    dE_dr, dE_dh = torch.autograd.grad(energy, (positions, cell), create_graph=create_graph)
    volume = torch.linalg.det(cell).abs()
    stress = cell.T @ dE_dh / volume
    return energy, -dE_dr, stress, charges


def make_trajectory(args, gen):
    n = args.n_atoms
    species = torch.tensor([0, 1] * (n // 2))
    true_q = torch.where(species == 0, 1.0, -1.0).double()
    cell = torch.eye(3, dtype=torch.float64) * args.box
    ns = integer_grid(args.nmax)
    base = torch.rand(n, 3, generator=gen, dtype=torch.float64) * args.box
    frames = []
    for _ in range(args.n_frames):
        pos = (base + 0.2 * torch.randn(n, 3, generator=gen, dtype=torch.float64)).requires_grad_(True)
        h = cell.clone().requires_grad_(True)
        e = ewald_energy(pos, true_q, h, reciprocal_kvectors(h, ns), args.smearing)
        e = e + 0.05 * (pos ** 2).sum() / args.box
        f, dh = torch.autograd.grad(e, (pos, h))
        frames.append(dict(positions=pos.detach(), cell=cell, species=species, energy=e.detach(),
                           forces=-f, stress=h.detach().T @ dh / torch.linalg.det(cell)))
    return frames


def main(args):
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    frames = make_trajectory(args, gen)
    model = ChargeEquilibrationModel(n_species=2, args=args)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)

    for epoch in range(args.epochs):
        opt.zero_grad()
        loss = torch.zeros((), dtype=torch.float64)
        for fr in frames:
            e, f, s, _ = energy_forces_stress(model, fr["positions"], fr["species"], fr["cell"],
                                              create_graph=True)
            loss = loss + (e - fr["energy"]) ** 2 / args.n_atoms
            loss = loss + args.w_force * ((f - fr["forces"]) ** 2).mean()
            loss = loss + args.w_stress * ((s - fr["stress"]) ** 2).mean()
        loss = loss / len(frames)
        loss.backward()  # raises
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        opt.step()
        sched.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")

    fr = frames[0]
    _, _, _, q = energy_forces_stress(model, fr["positions"], fr["species"], fr["cell"], False)
    print("predicted charges:", np.round(q.detach().numpy()[:4], 3))


if __name__ == "__main__":
    main(get_args([]))
