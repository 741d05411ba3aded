# expect: grad_unused
# source: https://github.com/atomistic-machine-learning/schnetpack/pull/673
"""SchNet-style neural network potential for periodic crystals (schnetpack 2
layout): an `NeuralNetworkPotential` runs a list of input modules, a
representation and output modules; the `Forces` output module derives forces
from the energy and, with `calc_stress=True`, the stress tensor via the
derivative w.r.t. a symmetric strain that the `Strain` input module applies to
positions and cell.  Trained on synthetic pair-potential energies/forces/stress.
"""
import math
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn

properties = SimpleNamespace(R="_positions", cell="_cell", idx_m="_idx_m", idx_i="_idx_i",
                             idx_j="_idx_j", offsets="_offsets", Rij="_Rij", n_atoms="_n_atoms",
                             Z="_atomic_numbers", strain="strain", energy="energy",
                             forces="forces", stress="stress")

cfg = SimpleNamespace(n_structures=12, n_atoms=4, cutoff=3.0, n_atom_basis=32, n_interactions=2,
                      n_rbf=16, batch_size=4, lr=5e-4, epochs=2, calc_stress=True,
                      loss_weights={"energy": 0.1, "forces": 1.0, "stress": 1.0}, seed=0)


class Strain(nn.Module):
    """Apply a (zero) strain to positions and cell so that the stress can be
    computed as a derivative of the energy."""

    def forward(self, inputs):
        strain = torch.zeros_like(inputs[properties.cell])
        strain.requires_grad_()
        inputs[properties.strain] = strain
        strain = strain.transpose(1, 2)
        inputs[properties.cell] = inputs[properties.cell] + torch.matmul(inputs[properties.cell], strain)
        idx_m = inputs[properties.idx_m]
        strain_i = strain[idx_m]
        inputs[properties.R] = inputs[properties.R] + torch.matmul(
            inputs[properties.R][:, None, :], strain_i).squeeze(1)
        return inputs


class PairwiseDistances(nn.Module):
    def forward(self, inputs):
        R = inputs[properties.R]
        offsets = inputs[properties.offsets]
        idx_i, idx_j = inputs[properties.idx_i], inputs[properties.idx_j]
        cell_ij = inputs[properties.cell][inputs[properties.idx_m][idx_i]]
        shift = torch.bmm(offsets[:, None, :], cell_ij).squeeze(1)
        inputs[properties.Rij] = R[idx_j] - R[idx_i] + shift
        return inputs


class GaussianRBF(nn.Module):
    def __init__(self, n_rbf, cutoff):
        super().__init__()
        self.register_buffer("offsets", torch.linspace(0, cutoff, n_rbf))
        self.width = (cutoff / n_rbf) ** 2

    def forward(self, d):
        return torch.exp(-0.5 / self.width * (d[..., None] - self.offsets) ** 2)


def cosine_cutoff(d, cutoff):
    return 0.5 * (torch.cos(d * math.pi / cutoff) + 1.0) * (d < cutoff).float()


class SchNetInteraction(nn.Module):
    def __init__(self, n_atom_basis, n_rbf, cutoff):
        super().__init__()
        self.cutoff = cutoff
        self.in2f = nn.Linear(n_atom_basis, n_atom_basis, bias=False)
        self.filter_net = nn.Sequential(nn.Linear(n_rbf, n_atom_basis), nn.Softplus(),
                                        nn.Linear(n_atom_basis, n_atom_basis))
        self.f2out = nn.Sequential(nn.Linear(n_atom_basis, n_atom_basis), nn.Softplus(),
                                   nn.Linear(n_atom_basis, n_atom_basis))

    def forward(self, x, f_ij, idx_i, idx_j, rcut_ij):
        x_j = self.in2f(x)[idx_j]
        w_ij = self.filter_net(f_ij) * rcut_ij[:, None]
        agg = torch.zeros_like(x).index_add(0, idx_i, x_j * w_ij)
        return self.f2out(agg)


class SchNet(nn.Module):
    def __init__(self, n_atom_basis, n_interactions, n_rbf, cutoff):
        super().__init__()
        self.embedding = nn.Embedding(10, n_atom_basis)
        self.rbf = GaussianRBF(n_rbf, cutoff)
        self.cutoff = cutoff
        self.interactions = nn.ModuleList(SchNetInteraction(n_atom_basis, n_rbf, cutoff)
                                          for _ in range(n_interactions))

    def forward(self, inputs):
        r_ij = inputs[properties.Rij]
        d_ij = torch.norm(r_ij, dim=1)
        f_ij, rcut_ij = self.rbf(d_ij), cosine_cutoff(d_ij, self.cutoff)
        x = self.embedding(inputs[properties.Z])
        for interaction in self.interactions:
            x = x + interaction(x, f_ij, inputs[properties.idx_i], inputs[properties.idx_j], rcut_ij)
        inputs["scalar_representation"] = x
        return inputs


class Atomwise(nn.Module):
    def __init__(self, n_in, output_key):
        super().__init__()
        self.output_key = output_key
        self.outnet = nn.Sequential(nn.Linear(n_in, n_in // 2), nn.Softplus(), nn.Linear(n_in // 2, 1))

    def forward(self, inputs):
        y_i = self.outnet(inputs["scalar_representation"]).squeeze(-1)
        n_mol = int(inputs[properties.idx_m].max()) + 1
        inputs[self.output_key] = torch.zeros(n_mol).index_add(0, inputs[properties.idx_m], y_i)
        return inputs


class Forces(nn.Module):
    def __init__(self, calc_forces=True, calc_stress=False, energy_key="energy"):
        super().__init__()
        self.calc_forces, self.calc_stress, self.energy_key = calc_forces, calc_stress, energy_key
        self.required_derivatives = [properties.R] + ([properties.strain] if calc_stress else [])

    def forward(self, inputs):
        Epred = inputs[self.energy_key]
        go = [torch.ones_like(Epred)]
        derivatives = [inputs[prop] for prop in self.required_derivatives]
        grads = torch.autograd.grad([Epred], derivatives, grad_outputs=go, create_graph=self.training)  # raises
        if self.calc_forces:
            inputs[properties.forces] = -grads[0]
        if self.calc_stress:
            cell = inputs[properties.cell]
            volume = torch.abs(torch.det(cell))[:, None, None]
            inputs[properties.stress] = grads[1] / volume
        return inputs


class NeuralNetworkPotential(nn.Module):
    def __init__(self, representation, input_modules, output_modules):
        super().__init__()
        self.representation = representation
        self.input_modules = nn.ModuleList(input_modules)
        self.output_modules = nn.ModuleList(output_modules)
        self.required_derivatives = []
        for m in self.output_modules:
            self.required_derivatives += getattr(m, "required_derivatives", [])

    def initialize_derivatives(self, inputs):
        for p in self.required_derivatives:
            if p in inputs:
                inputs[p].requires_grad_()
        return inputs

    def forward(self, inputs):
        inputs = self.initialize_derivatives(inputs)
        for m in self.input_modules:
            inputs = m(inputs)
        inputs = self.representation(inputs)
        for m in self.output_modules:
            inputs = m(inputs)
        return {k: inputs[k] for k in (properties.energy, properties.forces, properties.stress) if k in inputs}


def pair_energy(R, cell, Z):
    e = 0.0
    for i in range(len(R)):
        for j in range(len(R)):
            for shift in itertools_shifts():
                if i == j and shift == (0, 0, 0):
                    continue
                d = torch.norm(R[j] + torch.tensor(shift, dtype=R.dtype) @ cell - R[i])
                e = e + 0.5 * (Z[i] * Z[j]) * torch.exp(-d) * (d < cfg.cutoff)
    return e


def itertools_shifts():
    return [(a, b, c) for a in (-1, 0, 1) for b in (-1, 0, 1) for c in (-1, 0, 1)]


def make_dataset():
    rng = np.random.RandomState(cfg.seed)
    data = []
    for _ in range(cfg.n_structures):
        cell = torch.tensor(np.diag(rng.uniform(3.0, 3.6, size=3)), dtype=torch.float32)
        R = torch.tensor(rng.uniform(0, 3.0, size=(cfg.n_atoms, 3)), dtype=torch.float32)
        Z = torch.tensor(rng.randint(1, 4, size=cfg.n_atoms))
        eps = torch.zeros(3, 3, requires_grad=True)
        Rr = R.clone().requires_grad_(True)
        e = pair_energy(Rr + Rr @ eps, cell + cell @ eps, Z.float())
        dR, deps = torch.autograd.grad(e, [Rr, eps])
        data.append(dict(R=R, cell=cell, Z=Z, energy=e.detach(), forces=-dR,
                         stress=(deps / torch.det(cell)).detach()))
    return data


def collate(structs):
    n = cfg.n_atoms
    R = torch.cat([s["R"] for s in structs])
    idx_m = torch.arange(len(structs)).repeat_interleave(n)
    pairs = [(b * n + i, b * n + j, shift) for b in range(len(structs)) for i in range(n) for j in range(n)
             for shift in itertools_shifts() if not (i == j and shift == (0, 0, 0))]
    idx_i = torch.tensor([p[0] for p in pairs])
    idx_j = torch.tensor([p[1] for p in pairs])
    offsets = torch.tensor([p[2] for p in pairs], dtype=torch.float32)
    inputs = {properties.R: R, properties.cell: torch.stack([s["cell"] for s in structs]),
              properties.idx_m: idx_m, properties.idx_i: idx_i, properties.idx_j: idx_j,
              properties.offsets: offsets, properties.Z: torch.cat([s["Z"] for s in structs])}
    targets = {k: torch.stack([s[k] for s in structs]) if k != "forces" else torch.cat([s[k] for s in structs])
               for k in ("energy", "forces", "stress")}
    return inputs, targets


class Trainer:
    def __init__(self, model, data):
        self.model, self.data = model, data
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=1, gamma=0.8)

    def train_step(self, batch):
        inputs, targets = collate(batch)
        pred = self.model(inputs)
        loss = sum(w * ((pred[k] - targets[k]) ** 2).mean() for k, w in cfg.loss_weights.items() if k in pred)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def fit(self):
        for epoch in range(cfg.epochs):
            losses = [self.train_step(self.data[s:s + cfg.batch_size])
                      for s in range(0, len(self.data), cfg.batch_size)]
            self.scheduler.step()
            print(f"epoch {epoch}: loss {np.mean(losses):.4f}")


def main():
    torch.manual_seed(cfg.seed)
    representation = SchNet(cfg.n_atom_basis, cfg.n_interactions, cfg.n_rbf, cfg.cutoff)
    input_modules = [PairwiseDistances(), Strain()] if cfg.calc_stress else [PairwiseDistances()]
    output_modules = [Atomwise(cfg.n_atom_basis, "energy"), Forces(calc_forces=True, calc_stress=cfg.calc_stress)]
    model = NeuralNetworkPotential(representation, input_modules, output_modules)
    Trainer(model, make_dataset()).fit()


if __name__ == "__main__":
    main()
