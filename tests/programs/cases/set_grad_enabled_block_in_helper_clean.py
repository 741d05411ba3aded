# expect: clean
# shape: a helper makes the discriminator's inputs inside `with torch.set_grad_enabled(not volatile):` (called with volatile=True); leaving the block restores grad mode, so the discriminator's loss after it has a graph
import torch
import torch.nn as nn
import torch.nn.functional as F


def get_xy(mapping, src, volatile):
    with torch.set_grad_enabled(not volatile):
        x = mapping(src)
    return x, torch.ones(x.shape[0])


torch.manual_seed(0)
mapping = nn.Linear(8, 8)
disc = nn.Sequential(nn.Linear(8, 1), nn.Sigmoid())
opt = torch.optim.SGD(disc.parameters(), lr=0.1)
for step in range(2):
    x, y = get_xy(mapping, torch.randn(4, 8), volatile=True)
    loss = F.binary_cross_entropy(disc(x).view(-1), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
