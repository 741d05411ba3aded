# expect: clean
# shape: the auxiliary losses keep the graph for the main loss that follows
import torch
import torch.nn as nn


def auxiliary_losses(out, target):
    yield nn.functional.mse_loss(out, target)


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 1))
x, target = torch.randn(8, 6), torch.randn(8, 1)
out = model(x)
for aux in auxiliary_losses(out, target):
    aux.backward(retain_graph=True)
out.abs().mean().backward()
