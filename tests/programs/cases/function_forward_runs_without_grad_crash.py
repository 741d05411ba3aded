# expect: no_grad_fn
# shape: an adjoint ODE solver wraps integration in a custom autograd.Function; its forward (run by torch with grad off) calls the dynamics, which take forces as `autograd.grad` of an energy: the energy has no graph there
import torch
from torch import nn


class Dynamics(nn.Module):
    def __init__(self):
        super().__init__()
        self.energy = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 1))

    def forward(self, t, x):
        e = self.energy(x).sum()
        (dx,) = torch.autograd.grad(e, x, create_graph=True)  # raises
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
