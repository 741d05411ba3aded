# expect: clean
# shape: both branches of the if rebuild the cached value every iteration
import torch

w = torch.randn(5, requires_grad=True)
opt = torch.optim.SGD([w], lr=0.01)
for it in range(4):
    if it % 2 == 0:
        cache = torch.sigmoid(w * 3)
    else:
        cache = torch.sigmoid(w * 2)
    loss = (cache * w).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
