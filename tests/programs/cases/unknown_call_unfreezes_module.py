# expect: clean
# shape: parameters frozen, then made trainable again through a call GradGuard cannot see into
import functools

import torch
import torch.nn as nn


def set_requires_grad(net, flag):
    for p in net.parameters():
        p.requires_grad = flag


enable = functools.partial(set_requires_grad, flag=True)
net = nn.Linear(4, 4)
net.requires_grad_(False)
enable(net)
loss = net(torch.randn(2, 4)).sum()
loss.backward()
