# expect: freed_graph
# shape: forces come from `autograd.grad(energy, x, create_graph=self.training)` inside forward; after `model.eval()` that call frees the energy graph, and a loss on the energy backpropagates through it
import torch
import torch.nn as nn


class Potential(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 1))

    def forward(self, x):
        energy = self.net(x).squeeze(-1)
        # second derivatives only when the forces enter a training loss
        forces, = torch.autograd.grad(energy.sum(), x, create_graph=self.training)
        return energy, -forces


torch.manual_seed(0)
model = Potential()
model.eval()
delta = torch.zeros(8, 2, requires_grad=True)
opt = torch.optim.Adam([delta], lr=1e-2)
x0 = torch.randn(8, 2)
for step in range(2):
    opt.zero_grad()
    energy, forces = model(x0 + delta)
    loss = -(forces.pow(2).sum(-1) * torch.exp(-energy)).mean()
    loss.backward()  # raises
    opt.step()
