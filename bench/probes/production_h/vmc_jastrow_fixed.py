# expect: clean
# source: https://github.com/NLESC-JCER/QMCTorch/issues/30
"""VMC for small molecules: Gaussian-orbital Hartree product x Pade-Jastrow,
analytic kinetic energy, clipped-mean energy minimisation."""
import math
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

torch.manual_seed(0)
np.random.seed(0)

MOLECULES = {
    "H2": {"atoms": [("H", 1.0, (0.0, 0.0, -0.69)), ("H", 1.0, (0.0, 0.0, 0.69))],
           "nup": 1, "ndown": 1},
    "LiH": {"atoms": [("Li", 3.0, (0.0, 0.0, -1.5)), ("H", 1.0, (0.0, 0.0, 1.5))],
            "nup": 2, "ndown": 2},
}


@dataclass
class VMCConfig:
    molecules: tuple = ("H2", "LiH")
    nwalkers: int = 96
    nsteps_equil: int = 15
    nsteps_decor: int = 3
    step_size: float = 0.35
    jastrow_w: float = 1.0
    gauss_alpha: float = 0.6
    lr: float = 0.01
    epochs: int = 3
    clip_mad: float = 5.0
    log_every: int = 1
    sched_gamma: float = 0.9


class ElectronDistance(nn.Module):
    def __init__(self, nelec, ndim=3):
        super().__init__()
        self.nelec = nelec
        self.ndim = ndim

    def forward(self, pos, derivative=0):
        nbatch = pos.shape[0]
        x = pos.view(nbatch, self.nelec, self.ndim)
        diff = x.unsqueeze(2) - x.unsqueeze(1)                 # b, i, j, k
        r = diff.norm(dim=-1) + torch.eye(self.nelec)          # avoid 0 on diag
        if derivative == 0:
            return r
        unit = diff / r.unsqueeze(-1)
        if derivative == 1:
            return unit.permute(0, 3, 1, 2)                    # b, k, i, j
        return ((1.0 - unit ** 2) / r.unsqueeze(-1)).permute(0, 3, 1, 2)


class TwoBodyJastrowFactor(nn.Module):
    def __init__(self, nup, ndown, w=1.0):
        super().__init__()
        self.nup, self.ndown = nup, ndown
        self.nelec = nup + ndown
        self.weight = nn.Parameter(torch.tensor([w]))
        self.mask_tri_up, self.index_col, self.index_row = self.get_mask_tri_up()
        self.edist = ElectronDistance(self.nelec)
        self.static_weight = self.get_static_weight()
        self._get_index_partial_derivative()

    def get_mask_tri_up(self):
        mask = torch.zeros(self.nelec, self.nelec, dtype=torch.bool)
        index_col, index_row = [], []
        for i in range(self.nelec - 1):
            for j in range(i + 1, self.nelec):
                index_row.append(i)
                index_col.append(j)
                mask[i, j] = True
        return mask, torch.LongTensor(index_col), torch.LongTensor(index_row)

    def extract_tri_up(self, inp):
        return inp.masked_select(self.mask_tri_up).view(inp.shape[0], -1)

    def get_static_weight(self):
        bup = torch.cat((0.25 * torch.ones(self.nup, self.nup), 0.5 * torch.ones(self.nup, self.ndown)), dim=1)
        bdown = torch.cat((0.5 * torch.ones(self.ndown, self.nup), 0.25 * torch.ones(self.ndown, self.ndown)), dim=1)
        return torch.cat((bup, bdown), dim=0).masked_select(self.mask_tri_up)

    def _single_index(self, i, j):
        n = self.nelec
        return int((n * (n - 1) / 2) - (n - i) * ((n - i) - 1) / 2 + j - i - 1)

    def _get_index_partial_derivative(self):
        self.index_partial_der, weights, to_elec = [], [], []
        for idx in range(self.nelec):
            pairs = [(idx, j, 1.0) for j in range(idx + 1, self.nelec)] + [(j, idx, -1.0) for j in range(0, idx)]
            for p1 in range(len(pairs) - 1):
                i1, j1, w1 = pairs[p1]
                for p2 in range(p1 + 1, len(pairs)):
                    i2, j2, w2 = pairs[p2]
                    self.index_partial_der.append([self._single_index(i1, j1), self._single_index(i2, j2)])
                    weights.append(w1 * w2)
                    to_elec.append(idx)
        self.weight_partial_der = torch.tensor(weights) if weights else 1.0
        self.index_partial_der_to_elec = torch.LongTensor(to_elec)

    def _compute_kernel(self, r):
        return self.static_weight * r / (1.0 + self.weight * r)

    def _get_der_jastrow_elements(self, r, dr):
        r_ = r.unsqueeze(1)
        denom = 1.0 / (1.0 + self.weight * r_)
        return self.static_weight * dr * denom - self.static_weight * self.weight * r_ * dr * denom ** 2

    def _get_second_der_jastrow_elements(self, r, dr, d2r):
        r_ = r.unsqueeze(1)
        denom = 1.0 / (1.0 + self.weight * r_)
        denom2 = denom ** 2
        dr_square = dr ** 2
        a = self.static_weight * d2r * denom
        b = -2 * self.static_weight * self.weight * dr_square * denom2
        c = -self.static_weight * self.weight * r_ * d2r * denom2
        d = 2 * self.static_weight * self.weight ** 2 * r_ * dr_square * denom ** 3
        e = self._get_der_jastrow_elements(r, dr)
        return a + b + c + d + e ** 2

    def _partial_derivative(self, djast, out_mat):
        if len(self.index_partial_der) > 0:
            x = djast[..., self.index_partial_der]
            x = x.prod(-1)
            x = x * self.weight_partial_der
            x = x.sum(1)
            out_mat.index_add_(1, self.index_partial_der_to_elec, x)
        return out_mat

    def forward(self, pos, derivative=0):
        nbatch = pos.shape[0]
        r = self.extract_tri_up(self.edist(pos))
        jast = torch.exp(self._compute_kernel(r))
        prod_val = jast.prod(1).unsqueeze(-1)
        if derivative == 0:
            return prod_val
        dr = self.extract_tri_up(self.edist(pos, derivative=1)).view(nbatch, 3, -1)
        if derivative == 1:
            djast = self._get_der_jastrow_elements(r, dr) * prod_val.unsqueeze(-1)
            out = torch.zeros(nbatch, 3, self.nelec)
            out.index_add_(2, self.index_row, djast)
            out.index_add_(2, self.index_col, -djast)
            return out
        d2r = self.extract_tri_up(self.edist(pos, derivative=2)).view(nbatch, 3, -1)
        d2jast = self._get_second_der_jastrow_elements(r, dr, d2r).sum(1)
        hess_jast = torch.zeros(nbatch, self.nelec)
        hess_jast.index_add_(1, self.index_row, d2jast)
        hess_jast.index_add_(1, self.index_col, d2jast)
        hess_jast = 0.5 * hess_jast
        djast = self._get_der_jastrow_elements(r, dr)
        hess_jast = hess_jast + self._partial_derivative(djast, out_mat=hess_jast)
        return hess_jast * prod_val


class GaussianOrbitals(nn.Module):

    def __init__(self, centers, norb, alpha):
        super().__init__()
        self.register_buffer("centers", centers)
        natom = centers.shape[0]
        self.coeffs = nn.Parameter(torch.ones(norb, natom) + 0.1 * torch.randn(norb, natom))
        self.log_alpha = nn.Parameter(torch.full((natom,), math.log(alpha)))

    def forward(self, x):
        alpha = self.log_alpha.exp()
        d = x.unsqueeze(2) - self.centers                      # b, e, a, 3
        r2 = (d ** 2).sum(-1)
        g = torch.exp(-alpha * r2)
        dg = -2 * alpha.unsqueeze(-1) * d * g.unsqueeze(-1)
        lg = (4 * alpha ** 2 * r2 - 6 * alpha) * g
        val = torch.einsum("bea,oa->beo", g, self.coeffs)
        grad = torch.einsum("beak,oa->beko", dg, self.coeffs)
        lap = torch.einsum("bea,oa->beo", lg, self.coeffs)
        return val, grad, lap


class SlaterJastrowWF(nn.Module):
    def __init__(self, mol, cfg):
        super().__init__()
        self.charges = torch.tensor([a[1] for a in mol["atoms"]])
        centers = torch.tensor([a[2] for a in mol["atoms"]])
        self.nup, self.ndown = mol["nup"], mol["ndown"]
        self.nelec = self.nup + self.ndown
        norb = max(self.nup, self.ndown)
        self.occ = torch.LongTensor(list(range(self.nup)) + list(range(self.ndown)))
        self.orbitals = GaussianOrbitals(centers, norb, cfg.gauss_alpha)
        self.jastrow = TwoBodyJastrowFactor(self.nup, self.ndown, w=cfg.jastrow_w)

    def _occupied(self, pos):
        nbatch = pos.shape[0]
        x = pos.view(nbatch, self.nelec, 3)
        val, grad, lap = self.orbitals(x)
        idx = self.occ.view(1, -1, 1).expand(nbatch, -1, 1)
        v = val.gather(2, idx).squeeze(-1)
        l = lap.gather(2, idx).squeeze(-1)
        g = grad.gather(3, idx.unsqueeze(2).expand(-1, -1, 3, -1)).squeeze(-1).transpose(1, 2)
        return x, v, g, l

    def log_abs(self, pos):
        _, v, _, _ = self._occupied(pos)
        return torch.log(v.abs() + 1e-12).sum(1) + torch.log(self.jastrow(pos).squeeze(-1))

    def kinetic_energy(self, pos):
        _, v, g, l = self._occupied(pos)
        jast = self.jastrow(pos)
        djast = self.jastrow(pos, derivative=1) / jast.unsqueeze(-1)   # b, 3, e
        d2jast = self.jastrow(pos, derivative=2) / jast                 # b, e
        dmo = g / v.unsqueeze(1)                                         # b, 3, e
        bkin = l / v
        djast_dmo = (djast * dmo).sum(1)
        bkin = bkin + 2 * djast_dmo + d2jast
        return -0.5 * bkin.sum(1)

    def potential(self, pos):
        x = pos.view(pos.shape[0], self.nelec, 3)
        r_en = (x.unsqueeze(2) - self.orbitals.centers).norm(dim=-1).clamp_min(1e-3)
        v_en = -(self.charges / r_en).sum((1, 2))
        r_ee = self.jastrow.extract_tri_up(self.jastrow.edist(pos)).clamp_min(1e-3)
        v_ee = (1.0 / r_ee).sum(1)
        c, q = self.orbitals.centers, self.charges
        v_nn = sum(float(q[a] * q[b] / (c[a] - c[b]).norm()) for a in range(len(q)) for b in range(a + 1, len(q)))
        return v_en + v_ee + v_nn

    def local_energy(self, pos):
        return self.kinetic_energy(pos) + self.potential(pos)


class MetropolisSampler:
    def __init__(self, wf, cfg):
        self.wf, self.cfg, self.walkers = wf, cfg, None

    def init_walkers(self):
        c = self.wf.orbitals.centers
        idx = torch.randint(0, c.shape[0], (self.cfg.nwalkers, self.wf.nelec))
        pos = c[idx] + 0.5 * torch.randn(self.cfg.nwalkers, self.wf.nelec, 3)
        self.walkers = pos.view(self.cfg.nwalkers, -1)

    @torch.no_grad()
    def __call__(self, nsteps):
        if self.walkers is None:
            self.init_walkers()
        logp = 2 * self.wf.log_abs(self.walkers)
        acc = 0.0
        for _ in range(nsteps):
            prop = self.walkers + self.cfg.step_size * torch.randn_like(self.walkers)
            logp_new = 2 * self.wf.log_abs(prop)
            accept = torch.rand_like(logp).log() < (logp_new - logp)
            self.walkers = torch.where(accept.unsqueeze(-1), prop, self.walkers)
            logp = torch.where(accept, logp_new, logp)
            acc += accept.float().mean().item()
        return self.walkers.clone(), acc / max(nsteps, 1)


def clipped_mean(eloc, nmad):
    med = eloc.detach().median()
    mad = (eloc.detach() - med).abs().median() + 1e-6
    mask = (eloc.detach() - med).abs() < nmad * mad
    return eloc[mask].mean(), mask.float().mean().item()


def run_molecule(name, cfg):
    mol = MOLECULES[name]
    wf = SlaterJastrowWF(mol, cfg)
    sampler = MetropolisSampler(wf, cfg)
    opt = torch.optim.Adam(wf.parameters(), lr=cfg.lr)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=cfg.sched_gamma)
    sampler(cfg.nsteps_equil)
    history = []
    for epoch in range(cfg.epochs):
        pos, acc = sampler(cfg.nsteps_decor)
        eloc = wf.local_energy(pos)
        loss, kept = clipped_mean(eloc, cfg.clip_mad)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        history.append(loss.item())
        if epoch % cfg.log_every == 0:
            print(f"[{name}] epoch {epoch} E={loss.item():.4f} acc={acc:.2f} kept={kept:.2f} "
                  f"w={wf.jastrow.weight.item():.3f}")
    return history


def main():
    cfg = VMCConfig()
    t0 = time.time()
    results = {}
    for name in cfg.molecules:
        results[name] = run_molecule(name, cfg)
    print({k: round(v[-1], 4) for k, v in results.items()}, f"{time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
