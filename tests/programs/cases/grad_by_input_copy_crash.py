# expect: grad_unused
# shape: a physics-informed residual differentiates the network by its input coordinates, but the network was given a moved copy of them
import torch
import torch.nn as nn


class PINN(nn.Module):
    def __init__(self, hidden=16):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(1, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def forward(self, t):
        return self.net(t)


def residual(model, t):
    t = t.clone().requires_grad_()
    u = model(t * 1.0 + 0.0)
    x = t.clone()
    du_dt, = torch.autograd.grad(u.sum(), x, create_graph=True)  # raises
    return du_dt + u


model = PINN()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(3):
    t = torch.rand(32, 1)
    loss = residual(model, t).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
