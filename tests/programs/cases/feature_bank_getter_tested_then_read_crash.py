# expect: freed_graph
# shape: a feature bank whose getter is tested (`if bank.get() is not None:`) and read again in the loss; it returns the previous step's features, whose graph that step's backward freed
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
    loss.backward()  # raises
    opt.step()
    bank.put(f)
