# expect: clean
# shape: numpy computes a logged metric in the loop; the loss is a torch one
import numpy as np
import torch
import torch.nn as nn


def log_loss(p, y):
    p = np.clip(p, 1e-6, 1 - 1e-6)
    return np.mean(-(y * np.log(p) + (1 - y) * np.log(1 - p)))


net = nn.Linear(4, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
x, y = torch.randn(12, 4), (torch.rand(12, 1) > 0.5).float()
for step in range(2):
    out = torch.sigmoid(net(x))
    loss = nn.functional.binary_cross_entropy(out, y)
    metric = torch.tensor(log_loss(out.detach().numpy(), y.numpy()))
    opt.zero_grad()
    loss.backward()
    opt.step()
