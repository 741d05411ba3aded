# expect: freed_graph
# shape: one method caches a graph-carrying tensor on self, another method's loss uses it every step
import torch
import torch.nn as nn


class Trainer:
    def __init__(self):
        self.net = nn.Linear(4, 4)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1)
        self.anchor = None

    def set_anchor(self, x):
        self.anchor = torch.sigmoid(self.net(x))

    def step(self, x):
        loss = (self.net(x) - self.anchor).pow(2).mean()
        self.opt.zero_grad()
        loss.backward()  # raises
        self.opt.step()


t = Trainer()
t.set_anchor(torch.randn(2, 4))
for i in range(3):
    t.step(torch.randn(2, 4))
