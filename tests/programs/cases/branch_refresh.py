# expect: freed_graph
# shape: a cached value refreshed only in one branch of an if, reused by later iterations
import torch

w = torch.randn(5, requires_grad=True)
opt = torch.optim.SGD([w], lr=0.01)
for it in range(4):
    if it % 2 == 0:
        cache = torch.sigmoid(w * 3)
    loss = (cache * w).sum()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
