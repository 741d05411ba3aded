# expect: inplace_version
# shape: the same training loop, but the second ReLU(inplace=True) follows a Sigmoid, which saved its output
import torch
import torch.nn as nn

torch.manual_seed(0)
net = nn.Sequential(nn.Linear(4, 4), nn.ReLU(inplace=True), nn.Linear(4, 4), nn.Sigmoid(), nn.ReLU(inplace=True), nn.Linear(4, 1))
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for step in range(3):
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    loss = (net(x) - y).pow(2).mean()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
