# expect: nonleaf_optimizer
# shape: a regression net and a learned noise scale are optimized together through itertools.chain, with the parameters unpacked into it
import itertools

import torch
import torch.nn as nn

net = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))
log_sigma = torch.zeros(1, requires_grad=True)
optimizer = torch.optim.Adam(itertools.chain(*net.parameters(), log_sigma), lr=1e-2)  # raises
x, y = torch.randn(32, 3), torch.randn(32, 1)
for step in range(3):
    optimizer.zero_grad()
    nll = (0.5 * ((y - net(x)) / log_sigma.exp()) ** 2 + log_sigma).mean()
    nll.backward()
    optimizer.step()
