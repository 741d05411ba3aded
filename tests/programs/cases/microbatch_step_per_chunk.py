# expect: inplace_version
# shape: one forward split into micro-batches, an optimizer step after each piece's backward
import torch
import torch.nn as nn

net = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 1))
opt = torch.optim.SGD(net.parameters(), lr=0.01)
for epoch in range(2):
    out = net(torch.randn(32, 6))
    target = torch.randn(32, 1)
    for piece, t in zip(out.chunk(4), target.chunk(4)):
        loss = (piece - t).pow(2).mean()
        opt.zero_grad()
        loss.backward(retain_graph=True)  # raises
        opt.step()
