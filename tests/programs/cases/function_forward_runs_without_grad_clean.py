# expect: clean
# shape: the twin of function_forward_runs_without_grad_crash.py whose dynamics turn grad on and take a copy of the state that requires grad: the energy has a graph inside the solver's forward too
import torch
from torch import nn


class Dynamics(nn.Module):
    def __init__(self):
        super().__init__()
        self.energy = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 1))

    def forward(self, t, x):
        with torch.enable_grad():
            x = x.detach().requires_grad_(True)
            e = self.energy(x).sum()
            (dx,) = torch.autograd.grad(e, x, create_graph=True)
        return dx


class AdjointSolve(torch.autograd.Function):
    @staticmethod
    def forward(ctx, func, y0, steps):
        y = y0
        for i in range(steps):
            y = y + 0.1 * func(i * 0.1, y)
        return y

    @staticmethod
    def backward(ctx, grad):
        return None, grad, None


torch.manual_seed(0)
dyn = Dynamics()
y0 = torch.randn(4, 2, requires_grad=True)
y1 = AdjointSolve.apply(dyn, y0, 3)
y1.pow(2).sum().backward()
