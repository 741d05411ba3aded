# expect: nonscalar_backward
# shape: an implicit network is fitted to an image through the gradient of its output at a grid of coordinates built with meshgrid; the gradient helper differentiates the per-pixel output without grad_outputs
import torch
import torch.nn as nn


def get_mgrid(sidelen, dim=2):
    axes = tuple(dim * [torch.linspace(-1, 1, steps=sidelen)])
    grid = torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1)
    return grid.reshape(-1, dim)


def gradient(y, x):
    return torch.autograd.grad(y, [x], create_graph=True)[0]  # raises


net = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 1))
coords = get_mgrid(8).requires_grad_(True)
output = net(coords)
loss = gradient(output, coords).pow(2).mean()
loss.backward()
