# expect: clean
# source: https://github.com/atomistic-machine-learning/schnetpack/issues/724
"""Computing forces from a trained energy-only interatomic potential.

Atoms are converted to model inputs (neighbour list + pair vectors), a
small SchNet-like energy model predicts the molecular energy, and forces
are obtained as the negative derivative of the energy w.r.t. positions.
"""
import torch
import torch.nn as nn

torch.manual_seed(0)
CUTOFF = 5.0


def atoms_converter(positions, numbers):
    n = positions.shape[0]
    idx_i, idx_j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    keep = idx_i != idx_j
    idx_i, idx_j = idx_i[keep], idx_j[keep]
    Rij = positions[idx_j] - positions[idx_i]
    return {"_positions": positions, "_atomic_numbers": numbers,
            "_idx_i": idx_i, "_idx_j": idx_j, "_Rij": Rij}


class EnergyModel(nn.Module):
    def __init__(self, n_basis=16):
        super().__init__()
        self.embedding = nn.Embedding(10, n_basis)
        self.centers = nn.Parameter(torch.linspace(0.5, CUTOFF, n_basis), requires_grad=False)
        self.filter = nn.Linear(n_basis, n_basis)
        self.readout = nn.Sequential(nn.Linear(n_basis, n_basis), nn.Tanh(), nn.Linear(n_basis, 1))

    def forward(self, inputs):
        d = inputs["_Rij"].norm(dim=-1, keepdim=True)
        rbf = torch.exp(-(d - self.centers) ** 2)
        x = self.embedding(inputs["_atomic_numbers"])
        msg = self.filter(rbf) * x[inputs["_idx_j"]]
        x = x + torch.zeros_like(x).index_add(0, inputs["_idx_i"], msg)
        return {"energy": self.readout(x).sum()}


model = EnergyModel().eval()
positions = torch.randn(6, 3) * 1.5
numbers = torch.tensor([6, 1, 1, 8, 1, 1])

positions.requires_grad_()
inputs = atoms_converter(positions, numbers)
outputs = model(inputs)
grads = torch.autograd.grad(outputs["energy"], inputs["_positions"], create_graph=False)[0]
forces = -grads
print("energy", outputs["energy"].item())
print("forces", forces)
