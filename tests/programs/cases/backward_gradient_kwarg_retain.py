# expect: clean
# shape: per-sample losses backed twice with different weights; the first call passes gradient= and retain_graph=True
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Linear(4, 1)
x, y = torch.randn(8, 4), torch.randn(8)
losses = (model(x).squeeze(1) - y).pow(2)
g = torch.full_like(losses, 1 / 8)
losses.backward(gradient=g, retain_graph=True)
losses.backward(gradient=2 * g)
