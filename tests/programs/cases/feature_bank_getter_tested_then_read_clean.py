# expect: clean
# shape: the same bank filled with `f.detach()`: the previous features carry no graph
import torch
import torch.nn as nn


class FeatureBank:
    def __init__(self):
        self.feat = None

    def get(self):
        return self.feat

    def put(self, f):
        self.feat = f


net = nn.Linear(4, 4)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
bank = FeatureBank()
for step in range(3):
    f = net(torch.randn(2, 4))
    loss = f.mean()
    if bank.get() is not None:
        loss = loss + (f - bank.get()).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    bank.put(f.detach())
