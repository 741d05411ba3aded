# expect: clean
# shape: the same residual differentiates by the coordinates the network was given
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
    du_dt, = torch.autograd.grad(u.sum(), t, create_graph=True)
    return du_dt + u


model = PINN()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(3):
    t = torch.rand(32, 1)
    loss = residual(model, t).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
