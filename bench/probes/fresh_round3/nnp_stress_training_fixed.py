# expect: clean
# source: https://github.com/atomistic-machine-learning/schnetpack/pull/673
"""Neural network potential trained on energies, forces and stress of small periodic cells."""
import itertools
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

Z, R, CELL, IDX_M, IDX_I, IDX_J, OFFSETS, RIJ = "Z", "R", "cell", "idx_m", "idx_i", "idx_j", "offsets", "Rij"
STRAIN, ENERGY, FORCES, STRESS = "strain", "energy", "forces", "stress"


@dataclass
class ExperimentConfig:
    cutoff: float = 2.6
    n_atom_basis: int = 16
    n_rbf: int = 12
    n_structures: int = 8
    batch_size: int = 4
    epochs: int = 6
    lr: float = 5e-3
    loss_weights: dict = field(default_factory=lambda: {ENERGY: 0.1, FORCES: 1.0, STRESS: 10.0})
    input_modules: tuple = ("strain", "pairwise_distances")


def neighbor_list(pos, cell, cutoff):
    idx_i, idx_j, offsets = [], [], []
    for shift in itertools.product((-1, 0, 1), repeat=3):
        off = np.asarray(shift) @ cell
        for i, j in itertools.product(range(len(pos)), repeat=2):
            if i == j and shift == (0, 0, 0):
                continue
            if np.linalg.norm(pos[j] + off - pos[i]) < cutoff:
                idx_i.append(i)
                idx_j.append(j)
                offsets.append(off)
    return np.array(idx_i), np.array(idx_j), np.array(offsets)


def lennard_jones_reference(pos, cell, idx_i, idx_j, offsets, eps=0.5, sigma=1.2):
    pos = torch.tensor(pos, requires_grad=True)
    cell = torch.tensor(cell)
    strain = torch.zeros(3, 3, dtype=pos.dtype, requires_grad=True)
    sym = 0.5 * (strain + strain.t())
    rij = (pos + pos @ sym)[idx_j] - (pos + pos @ sym)[idx_i] + torch.tensor(offsets) @ (torch.eye(3, dtype=pos.dtype) + sym)
    d = rij.norm(dim=1)
    energy = 0.5 * (4 * eps * ((sigma / d) ** 12 - (sigma / d) ** 6)).sum()
    dpos, dstrain = torch.autograd.grad(energy, [pos, strain])
    volume = torch.det(cell)
    return energy.item(), (-dpos).numpy(), (dstrain / volume).numpy()


def make_dataset(cfg, rng):
    structures = []
    for _ in range(cfg.n_structures):
        a = rng.uniform(2.9, 3.3)
        cell = np.eye(3) * a
        pos = np.array([[0, 0, 0], [0.5, 0.5, 0], [0.5, 0, 0.5], [0, 0.5, 0.5]]) * a + rng.normal(0, 0.08, (4, 3))
        idx_i, idx_j, offsets = neighbor_list(pos, cell, cfg.cutoff)
        e, f, s = lennard_jones_reference(pos, cell, idx_i, idx_j, offsets)
        structures.append(dict(Z=np.full(4, 18), R=pos, cell=cell, idx_i=idx_i, idx_j=idx_j, offsets=offsets,
                               energy=e, forces=f, stress=s))
    return structures


def collate(structures):
    batch, n_seen = {k: [] for k in (Z, R, CELL, IDX_M, IDX_I, IDX_J, OFFSETS, ENERGY, FORCES, STRESS)}, 0
    for m, s in enumerate(structures):
        n = len(s["Z"])
        batch[Z].append(torch.tensor(s["Z"]))
        batch[R].append(torch.tensor(s["R"], dtype=torch.float32))
        batch[CELL].append(torch.tensor(s["cell"], dtype=torch.float32)[None])
        batch[IDX_M].append(torch.full((n,), m))
        batch[IDX_I].append(torch.tensor(s["idx_i"]) + n_seen)
        batch[IDX_J].append(torch.tensor(s["idx_j"]) + n_seen)
        batch[OFFSETS].append(torch.tensor(s["offsets"], dtype=torch.float32))
        batch[ENERGY].append(torch.tensor([s["energy"]], dtype=torch.float32))
        batch[FORCES].append(torch.tensor(s["forces"], dtype=torch.float32))
        batch[STRESS].append(torch.tensor(s["stress"], dtype=torch.float32)[None])
        n_seen += n
    return {k: torch.cat(v) for k, v in batch.items()}


class PairwiseDistances(nn.Module):
    def forward(self, inputs):
        inputs[RIJ] = inputs[R][inputs[IDX_J]] - inputs[R][inputs[IDX_I]] + inputs[OFFSETS]
        return inputs


class Strain(nn.Module):
    def forward(self, inputs):
        strain = torch.zeros_like(inputs[CELL])
        strain.requires_grad_()
        inputs[STRAIN] = strain
        strain = strain.transpose(1, 2)
        inputs[CELL] = inputs[CELL] + torch.matmul(inputs[CELL], strain)
        strain_i = strain[inputs[IDX_M]]
        inputs[R] = inputs[R] + torch.matmul(inputs[R][:, None, :], strain_i).squeeze(1)
        strain_ij = strain_i[inputs[IDX_I]]
        inputs[OFFSETS] = inputs[OFFSETS] + torch.matmul(inputs[OFFSETS][:, None, :], strain_ij).squeeze(1)
        return inputs


INPUT_MODULES = {"pairwise_distances": PairwiseDistances, "strain": Strain}


class SchNetLite(nn.Module):
    def __init__(self, n_atom_basis, n_rbf, cutoff, n_interactions=2):
        super().__init__()
        self.cutoff = cutoff
        self.embedding = nn.Embedding(100, n_atom_basis)
        self.register_buffer("centers", torch.linspace(0.5, cutoff, n_rbf))
        self.filters = nn.ModuleList([nn.Sequential(nn.Linear(n_rbf, n_atom_basis), nn.Tanh()) for _ in range(n_interactions)])
        self.updates = nn.ModuleList([nn.Linear(n_atom_basis, n_atom_basis) for _ in range(n_interactions)])

    def forward(self, inputs):
        d = torch.norm(inputs[RIJ], dim=1)
        rbf = torch.exp(-4.0 * (d[:, None] - self.centers) ** 2)
        fcut = 0.5 * (torch.cos(d * np.pi / self.cutoff) + 1.0) * (d < self.cutoff).float()
        x = self.embedding(inputs[Z])
        for filt, upd in zip(self.filters, self.updates):
            msg = x[inputs[IDX_J]] * filt(rbf) * fcut[:, None]
            x = x + upd(torch.zeros_like(x).index_add(0, inputs[IDX_I], msg))
        inputs["scalar_representation"] = x
        return inputs


class Atomwise(nn.Module):
    def __init__(self, n_in):
        super().__init__()
        self.outnet = nn.Sequential(nn.Linear(n_in, n_in), nn.SiLU(), nn.Linear(n_in, 1))

    def forward(self, inputs):
        yi = self.outnet(inputs["scalar_representation"]).squeeze(-1)
        n_mol = int(inputs[IDX_M].max()) + 1
        inputs[ENERGY] = torch.zeros(n_mol).index_add(0, inputs[IDX_M], yi)
        return inputs


class Forces(nn.Module):
    def __init__(self, calc_forces=True, calc_stress=False):
        super().__init__()
        self.calc_forces, self.calc_stress = calc_forces, calc_stress
        self.required_derivatives = [R] + ([STRAIN] if calc_stress else [])

    def forward(self, inputs):
        energy = inputs[ENERGY]
        derivatives = [inputs[p] for p in self.required_derivatives]
        grad_outputs = [torch.ones_like(energy)]
        grads = torch.autograd.grad([energy], derivatives, grad_outputs, create_graph=self.training)
        if self.calc_forces:
            inputs[FORCES] = -grads[0]
        if self.calc_stress:
            cell = inputs[CELL]
            volume = torch.sum(cell[:, 0] * torch.cross(cell[:, 1], cell[:, 2], dim=1), dim=1, keepdim=True)
            inputs[STRESS] = grads[-1] / volume[:, :, None]
        return inputs


class NeuralNetworkPotential(nn.Module):
    def __init__(self, representation, input_modules, output_modules):
        super().__init__()
        self.representation = representation
        self.input_modules = nn.ModuleList(input_modules)
        self.output_modules = nn.ModuleList(output_modules)

    def forward(self, inputs):
        inputs = dict(inputs)
        inputs[R].requires_grad_()
        for m in self.input_modules:
            inputs = m(inputs)
        inputs = self.representation(inputs)
        for m in self.output_modules:
            inputs = m(inputs)
        return inputs


def build_model(cfg):
    return NeuralNetworkPotential(
        representation=SchNetLite(cfg.n_atom_basis, cfg.n_rbf, cfg.cutoff),
        input_modules=[INPUT_MODULES[name]() for name in cfg.input_modules],
        output_modules=[Atomwise(cfg.n_atom_basis), Forces(calc_forces=True, calc_stress=True)],
    )


def main():
    cfg = ExperimentConfig()
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    data = make_dataset(cfg, rng)
    model = build_model(cfg)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    for epoch in range(cfg.epochs):
        order = rng.permutation(len(data))
        total = 0.0
        for b in range(0, len(data), cfg.batch_size):
            batch = collate([data[i] for i in order[b:b + cfg.batch_size]])
            targets = {k: batch.pop(k) for k in (ENERGY, FORCES, STRESS)}
            pred = model(batch)
            loss = sum(w * F.mse_loss(pred[k], targets[k]) for k, w in cfg.loss_weights.items())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
        print("epoch {}: loss {:.4f}".format(epoch, total))


if __name__ == "__main__":
    main()
