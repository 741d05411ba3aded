# expect: clean
# shape: a noise tensor made once through a function looked up in a dict (a registry), reused every step
import functools

import torch
import torch.nn as nn

NOISE = {"gaussian": torch.randn, "uniform": functools.partial(torch.rand, generator=None)}

torch.manual_seed(0)
noise = NOISE["gaussian"](16, 4)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(5):
    x = torch.randn(16, 4)
    loss = (model(x + 0.1 * noise) - x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
