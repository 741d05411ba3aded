# expect: inplace_version
# shape: optimizer.step() between two backward passes through the same graph (retain_graph), on parameters it saved
import torch
import torch.nn as nn

net = nn.Linear(3, 3)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
x = torch.randn(2, 3, requires_grad=True)
out = net(x)
out.sum().backward(retain_graph=True)
opt.step()
out.pow(2).sum().backward()  # raises
