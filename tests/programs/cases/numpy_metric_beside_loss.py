# expect: clean
# shape: numpy computes a logged metric; the loss is computed with torch
import numpy as np
import torch
import torch.nn as nn


def mae(pred, target):
    d = np.abs(pred.detach().numpy() - target.numpy())
    return torch.tensor(d.mean())


net = nn.Linear(3, 2)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
x, y = torch.randn(10, 3), torch.randn(10, 2)
for step in range(2):
    out = net(x)
    loss = nn.functional.smooth_l1_loss(out, y)
    metric = mae(out, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
