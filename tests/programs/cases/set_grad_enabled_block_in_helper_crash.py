# expect: no_grad_fn
# shape: a helper computes the whole loss inside `with torch.set_grad_enabled(not volatile):`, called with volatile=True: the loss has no graph
import torch
import torch.nn as nn
import torch.nn.functional as F


def get_loss(disc, mapping, src, volatile):
    with torch.set_grad_enabled(not volatile):
        x = mapping(src)
        return F.binary_cross_entropy(disc(x).view(-1), torch.ones(x.shape[0]))


torch.manual_seed(0)
mapping = nn.Linear(8, 8)
disc = nn.Sequential(nn.Linear(8, 1), nn.Sigmoid())
opt = torch.optim.SGD(disc.parameters(), lr=0.1)
for step in range(2):
    loss = get_loss(disc, mapping, torch.randn(4, 8), volatile=True)
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
