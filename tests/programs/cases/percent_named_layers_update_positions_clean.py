# expect: clean
# shape: an equivariant network registers its layers with `add_module("gcl_%d" % i, ...)` and runs them through `self._modules["gcl_%d" % i]`; each layer moves a copy of the coordinates, and the forces are taken with respect to positions that are a leaf requiring grad
import torch
import torch.nn as nn


class CoordLayer(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.edge = nn.Linear(dim, 1)

    def forward(self, h, coord):
        coord = coord + self.edge(h) * coord
        return coord


class Network(nn.Module):
    def __init__(self, dim, n_layers=2):
        super().__init__()
        self.n_layers = n_layers
        for i in range(n_layers):
            self.add_module("gcl_%d" % i, CoordLayer(dim))

    def forward(self, h, coord):
        for i in range(self.n_layers):
            coord = self._modules["gcl_%d" % i](h, coord)
        return coord


net = Network(4)
positions = torch.randn(5, 3, requires_grad=True)
energy = net(torch.randn(5, 4), positions).pow(2).sum()
forces = -torch.autograd.grad(energy, positions)[0]
