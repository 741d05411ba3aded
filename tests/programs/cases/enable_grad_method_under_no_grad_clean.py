# expect: clean
# shape: a method decorated `@torch.enable_grad()` takes forces as gradients of the energy while its caller evaluates under `torch.no_grad()`: the decorator switches recording back on inside the method
import torch
import torch.nn as nn

torch.manual_seed(0)


class Potential(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 1))

    @torch.enable_grad()
    def forces(self, positions):
        positions = positions.detach().requires_grad_(True)
        energy = self.net(positions).sum()
        (grad,) = torch.autograd.grad(energy, positions)
        return -grad


model = Potential()
with torch.no_grad():
    f = model.forces(torch.randn(5, 3))
print(f.shape)
