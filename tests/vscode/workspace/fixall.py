import torch
import torch.nn as nn

net = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
y = net(torch.randn(2, 4))
y.sigmoid_()  # tanh saved its output for backward
y.sum().backward()
