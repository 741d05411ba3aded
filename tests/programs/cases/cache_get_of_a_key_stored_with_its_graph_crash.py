# expect: freed_graph
# shape: `cache.get("prev")` returns None on the first step and the previous step's output, graph and all, on the next
import torch
import torch.nn as nn

net = nn.Linear(4, 4)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
cache = {"warmup": torch.zeros(2, 4)}
for step in range(3):
    f = net(torch.randn(2, 4))
    loss = f.mean()
    prev = cache.get("prev")
    if prev is not None:
        loss = loss + (f - prev).pow(2).mean()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
    cache["prev"] = f
