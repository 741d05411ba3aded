# expect: clean
# shape: a helper dispatches on `type(x) is np.ndarray` (numpy squashing for arrays, torch for tensors) and on `isinstance(x, np.ndarray)`; a tensor that requires grad only ever takes the torch branch
import numpy as np
import torch
import torch.nn as nn


def scale(x, lb, ub):
    if type(x) is np.ndarray:
        x = 1 / (1 + np.exp(-x))
    else:
        x = torch.sigmoid(x)
    return lb + (ub - lb) * x


def clip(x, bound):
    if isinstance(x, np.ndarray):
        return np.clip(x, -bound, bound)
    return x.clamp(-bound, bound)


torch.manual_seed(0)
policy = nn.Linear(3, 2)
opt = torch.optim.SGD(policy.parameters(), lr=0.1)
for step in range(2):
    action = clip(scale(policy(torch.randn(4, 3)), -5.0, 5.0), 4.0)
    loss = (action ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
