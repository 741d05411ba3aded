# expect: clean
# shape: the scaled weight is made a leaf before the optimizer sees it
import torch
import torch.nn as nn


class ScaledSGD(torch.optim.Optimizer):
    def __init__(self, params, lr=0.1):
        super().__init__(params, dict(lr=lr))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"])


torch.manual_seed(0)
weight = (torch.randn(4, 4) * 0.01).requires_grad_()
opt = ScaledSGD([weight])
x = torch.randn(3, 4)
loss = (x @ weight).pow(2).mean()
loss.backward()
opt.step()
