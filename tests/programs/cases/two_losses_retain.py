# expect: clean
# shape: two losses over one forward, the first backward keeps the graph
import torch
import torch.nn as nn

net = nn.Sequential(nn.Linear(3, 4), nn.Tanh())
out = net(torch.randn(2, 3))
a = out.sum()
b = out.pow(2).sum()
a.backward(retain_graph=True)
b.backward()
