# expect: clean
# source: https://github.com/MaterSim/PyXtal_FF/issues/22
"""Neural-network interatomic potential (Behler-Parrinello style, PyXtal_FF
layout): per-element atomic networks on symmetry-function descriptors, forces
from dE/dx contracted with dx/dr, energy + force loss.
"""
import math
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)


def cutoff_fn(r, rc):
    return 0.5 * (torch.cos(math.pi * r / rc) + 1.0) * (r < rc)


def g2_descriptors(pos, etas, rss, rc):
    """Radial G2 symmetry functions, one row per atom."""
    diff = pos[:, None, :] - pos[None, :, :]
    r = (diff.pow(2).sum(-1) + torch.eye(len(pos))).sqrt()
    mask = 1.0 - torch.eye(len(pos))
    feats = []
    for eta, rs in zip(etas, rss):
        feats.append((torch.exp(-eta * (r - rs) ** 2) * cutoff_fn(r, rc) * mask).sum(1))
    return torch.stack(feats, dim=1)


def reference_potential(pos, eps=0.4, sigma=1.1):
    """Lennard-Jones reference energy and forces for the synthetic data set."""
    pos = pos.clone().requires_grad_(True)
    diff = pos[:, None, :] - pos[None, :, :]
    iu = torch.triu_indices(len(pos), len(pos), offset=1)
    r = diff[iu[0], iu[1]].norm(dim=-1)
    energy = (4 * eps * ((sigma / r) ** 12 - (sigma / r) ** 6)).sum()
    force = -torch.autograd.grad(energy, pos)[0]
    return energy.detach(), force.detach()


def build_dataset(n_structures, rng, desc_cfg):
    data = []
    for _ in range(n_structures):
        n_atoms = int(rng.randint(4, 7))
        grid = np.stack(np.meshgrid(*[np.arange(2)] * 3), -1).reshape(-1, 3)[:n_atoms] * 1.6
        pos = torch.tensor(grid + 0.15 * rng.randn(n_atoms, 3))
        x = g2_descriptors(pos, **desc_cfg)
        dxdr = torch.autograd.functional.jacobian(lambda p: g2_descriptors(p, **desc_cfg), pos)
        energy, force = reference_potential(pos)
        # dxdr[i, k, j, l] -> [i, j, k, l]: descriptor k of atom i w.r.t. coordinate l of atom j
        data.append({"x": {"Si": x.detach()}, "dxdr": {"Si": dxdr.permute(0, 2, 1, 3).contiguous()},
                     "energy": energy, "force": force, "n_atoms": n_atoms})
    return data


class NeuralNetwork:
    def __init__(self, elements, hiddenlayers, activation, random_seed, batch_size=4,
                 epoch=3, alpha=None, force_coefficient=0.03, memory="cpu", optimizer=None):
        self.elements = sorted(elements)
        self.hiddenlayers = hiddenlayers
        self.activation = activation
        self.batch_size = batch_size
        self.epoch = epoch
        self.alpha = alpha
        self.force_coefficient = force_coefficient
        self.memory = memory
        self.optimizer_cfg = optimizer or {"method": "Adam", "parameters": {"lr": 1e-2}}
        torch.manual_seed(random_seed)
        self.models = {}
        for element in self.elements:
            layers, n_in = [], None
            for n_out in self.hiddenlayers[element]:
                layers += [nn.LazyLinear(n_out) if n_in is None else nn.Linear(n_in, n_out),
                           self._activation()]
                n_in = n_out
            layers.append(nn.Linear(n_in, 1))
            self.models[element] = nn.Sequential(*layers)

    def _activation(self):
        return {"Tanh": nn.Tanh, "Sigmoid": nn.Sigmoid, "ReLU": nn.ReLU}[self.activation]()

    def parameters(self):
        return [p for m in self.models.values() for p in m.parameters()]

    def _regularization(self, models):
        reg = 0.
        if self.alpha:
            for model in models.values():
                for name, params in model.named_parameters():
                    if "weight" in name:
                        reg += self.alpha * params.pow(2).sum()
        return reg

    def calculate_loss(self, models, batch):
        """Energy and force loss, one structure at a time."""
        energy_loss, force_loss, all_atoms = 0., 0., 0
        for s in batch:
            n_atoms = s["n_atoms"]
            all_atoms += n_atoms
            _Energy = 0
            _force = torch.zeros([n_atoms, 3])
            for element, model in models.items():
                _x = s["x"][element].clone().requires_grad_()
                _energy = model(_x).sum()
                _Energy += _energy
                if self.force_coefficient:
                    dedx = torch.autograd.grad(_energy, _x, create_graph=True)[0]
                    _force -= torch.einsum("ik, ijkl->jl", dedx, s["dxdr"][element])
            energy_loss += ((_Energy - s["energy"]) / n_atoms) ** 2
            force_loss += self.force_coefficient * ((_force - s["force"]) ** 2).sum()
        loss = energy_loss / (2. * len(batch)) + force_loss / (2. * all_atoms)
        return loss + self._regularization(models)

    def calculate_loss_bigarray(self, models, batch):
        """Same loss, but each element network runs once on the stacked batch."""
        energy_loss, force_loss, all_atoms = 0., 0., 0
        for element, model in models.items():
            x = torch.cat([s["x"][element] for s in batch], dim=0).requires_grad_()
            atomic_energies = model(x).squeeze(-1)
            start = 0
            for s in batch:
                n_atoms = s["n_atoms"]
                end = start + n_atoms
                _Energy = atomic_energies[start:end].sum()
                energy_loss += ((_Energy - s["energy"]) / n_atoms) ** 2
                if self.force_coefficient:
                    # differentiate w.r.t. the stacked tensor, then take this structure's rows
                    dedx = torch.autograd.grad(_Energy, x, create_graph=True)[0][start:end]
                    _force = -torch.einsum("ik, ijkl->jl", dedx, s["dxdr"][element])
                    force_loss += self.force_coefficient * ((_force - s["force"]) ** 2).sum()
                all_atoms += n_atoms
                start = end
        loss = energy_loss / (2. * len(batch)) + force_loss / (2. * all_atoms)
        return loss + self._regularization(models)

    def train(self, TrainData):
        # materialise lazy layers before building the optimizer
        for element, model in self.models.items():
            model(TrainData[0]["x"][element])
        opt_cls = getattr(torch.optim, self.optimizer_cfg["method"])
        self.optimizer = opt_cls(self.parameters(), **self.optimizer_cfg["parameters"])
        loss_fn = self.calculate_loss_bigarray if self.memory == "gpu" else self.calculate_loss
        for epoch in range(self.epoch):
            for i in range(0, len(TrainData), self.batch_size):
                batch = TrainData[i:i + self.batch_size]
                self.optimizer.zero_grad()
                loss = loss_fn(self.models, batch)
                loss.backward()
                self.optimizer.step()
            print("epoch {:3d}  loss {:10.6f}".format(epoch, loss.item()))

    def evaluate(self, data):
        e_err, f_err = [], []
        for s in data:
            x = s["x"]["Si"].clone().requires_grad_()
            e = self.models["Si"](x).sum()
            dedx = torch.autograd.grad(e, x)[0]
            f = -torch.einsum("ik, ijkl->jl", dedx, s["dxdr"]["Si"])
            e_err.append(abs(e.item() - s["energy"].item()) / s["n_atoms"])
            f_err.append(F.l1_loss(f, s["force"]).item())
        return OrderedDict(energy_mae=float(np.mean(e_err)), force_mae=float(np.mean(f_err)))


def main():
    rng = np.random.RandomState(0)
    desc_cfg = {"etas": [0.5, 1.0, 2.0, 4.0], "rss": [0.0, 1.0, 1.5, 2.0], "rc": 4.0}
    train_data = build_dataset(12, rng, desc_cfg)
    test_data = build_dataset(4, rng, desc_cfg)
    para = {"elements": ["Si"], "hiddenlayers": {"Si": [16, 16]}, "activation": "Tanh",
            "random_seed": 12345, "batch_size": 4, "epoch": 3, "alpha": 1e-6,
            "force_coefficient": 0.03, "memory": "gpu",
            "optimizer": {"method": "Adam", "parameters": {"lr": 5e-3}}}
    nn_model = NeuralNetwork(**para)
    nn_model.train(train_data)
    print(nn_model.evaluate(test_data))


if __name__ == "__main__":
    main()
