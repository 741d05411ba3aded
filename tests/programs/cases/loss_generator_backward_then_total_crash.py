# expect: freed_graph
# shape: a helper generator yields the auxiliary losses of one forward (here just one, always); each is backpropagated in a loop, then the main loss of the same forward is backpropagated
import torch
import torch.nn as nn


def auxiliary_losses(out, target):
    yield nn.functional.mse_loss(out, target)


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 1))
x, target = torch.randn(8, 6), torch.randn(8, 1)
out = model(x)
for aux in auxiliary_losses(out, target):
    aux.backward()
out.abs().mean().backward()  # raises
