# expect: clean
# shape: `cache.get("prev")` of a key the program never stores is None every step, though the dict holds a tensor with a graph under another key: the branch that would reuse it never runs
import torch
import torch.nn as nn

net = nn.Linear(4, 4)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
cache = {}
for step in range(3):
    f = net(torch.randn(2, 4))
    loss = f.mean()
    prev = cache.get("prev")
    if prev is not None:
        loss = loss + (f - prev).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    cache["feat"] = f
