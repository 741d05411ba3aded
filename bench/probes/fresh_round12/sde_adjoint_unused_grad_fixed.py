# expect: clean
# source: https://github.com/pytorch/pytorch/issues/39784
"""Vector-Jacobian products for the backward (adjoint) pass of a neural SDE
solver in the style of torchsde: at each reversed time step the adjoint
state is pulled back through the drift with torch.autograd.grad, asking for
gradients with respect to the state and every drift parameter."""
import torch
import torch.nn as nn


class Drift(nn.Module):
    def __init__(self, d=3):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, 16), nn.Tanh(), nn.Linear(16, d))
        self.sigma = nn.Parameter(torch.full((d,), 0.1))

    def forward(self, t, y):
        return self.net(y) * (1.0 + 0.1 * t)


torch.manual_seed(0)
f = Drift()
params = tuple(f.parameters())
ts = torch.linspace(0.0, 1.0, 6)
dt = ts[1] - ts[0]

# forward Euler pass, keeping the states
y = torch.randn(4, 3)
ys = [y]
with torch.no_grad():
    for t in ts[:-1]:
        y = y + f(t, y) * dt
        ys.append(y)

# backward adjoint pass
adj_y = torch.ones_like(ys[-1])
adj_params = [torch.zeros_like(p) for p in params]
for i in range(len(ts) - 1, 0, -1):
    y_i = ys[i - 1].detach().requires_grad_(True)
    with torch.enable_grad():
        f_eval = f(ts[i - 1], y_i)
        vjp_y, *vjp_params = torch.autograd.grad(f_eval, (y_i,) + params, adj_y, allow_unused=True)
    adj_y = adj_y + vjp_y * dt
    adj_params = [a if g is None else a + g * dt for a, g in zip(adj_params, vjp_params)]

print("adjoint state norm", adj_y.norm().item())
