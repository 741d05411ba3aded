# expect: no_grad_fn
# shape: the same method without the decorator: under the caller's `torch.no_grad()` the energy has no graph to differentiate
import torch
import torch.nn as nn

torch.manual_seed(0)


class Potential(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 1))


    def forces(self, positions):
        positions = positions.detach().requires_grad_(True)
        energy = self.net(positions).sum()
        (grad,) = torch.autograd.grad(energy, positions)  # raises
        return -grad


model = Potential()
with torch.no_grad():
    f = model.forces(torch.randn(5, 3))
print(f.shape)
