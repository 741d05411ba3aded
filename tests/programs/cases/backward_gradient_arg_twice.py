# expect: freed_graph
# shape: per-sample losses backed with `backward(torch.ones_like(losses))` (a gradient, not retain_graph), then again
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Linear(4, 1)
x, y = torch.randn(8, 4), torch.randn(8)
losses = (model(x).squeeze(1) - y).pow(2)
losses.backward(torch.ones_like(losses))
losses.backward(torch.ones_like(losses))  # raises
