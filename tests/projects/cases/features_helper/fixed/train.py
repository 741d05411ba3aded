# expect: clean
# shape: features computed by a helper of another module, before the loop, reused every iteration
import torch
import torch.nn as nn

from features import embed

encoder = nn.Linear(4, 8)
head = nn.Linear(8, 1)
opt = torch.optim.SGD(head.parameters(), lr=0.1)
x, y = torch.randn(16, 4), torch.randn(16, 1)
feats = embed(encoder, x)
for step in range(3):
    loss = (head(feats) - y).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
