# expect: inplace_version
# shape: the same add_module-built Sequential with a Tanh (which saves its output) added before the in-place ReLU
import torch
import torch.nn as nn

torch.manual_seed(0)
net = nn.Sequential()
net.add_module("fc1", nn.Linear(4, 8))
net.add_module("gate", nn.Tanh())
net.add_module("act1", nn.ReLU(inplace=True))
net.add_module("fc2", nn.Linear(8, 1))
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for step in range(3):
    loss = net(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
