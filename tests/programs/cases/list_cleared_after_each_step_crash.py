# expect: freed_graph
# shape: the same list never cleared: the next step's sum also holds the previous output, whose graph is freed
import torch
import torch.nn as nn

net = nn.Linear(4, 4)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
feats = []
for step in range(3):
    f = net(torch.randn(2, 4))
    feats.append(f)
    loss = sum(x.mean() for x in feats)
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
