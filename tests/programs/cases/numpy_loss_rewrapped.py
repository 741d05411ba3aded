# expect: no_grad_fn
# shape: a loss computed with numpy on the predictions, wrapped back into a tensor
import numpy as np
import torch
import torch.nn as nn


def smooth_l1(pred, target, beta=1.0):
    d = np.abs(pred.detach().numpy() - target.numpy())
    v = np.where(d < beta, 0.5 * d ** 2 / beta, d - 0.5 * beta)
    return torch.tensor(v.mean(axis=0).sum())


net = nn.Linear(3, 2)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
x, y = torch.randn(10, 3), torch.randn(10, 2)
for step in range(2):
    loss = smooth_l1(net(x), y)
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
