# expect: clean
# shape: micro-batch gradients accumulated, one step after the pieces
import torch
import torch.nn as nn

net = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 1))
opt = torch.optim.SGD(net.parameters(), lr=0.01)
for epoch in range(2):
    out = net(torch.randn(32, 6))
    target = torch.randn(32, 1)
    for piece, t in zip(out.chunk(4), target.chunk(4)):
        loss = (piece - t).pow(2).mean()
        loss.backward(retain_graph=True)
    opt.step()
    opt.zero_grad()
