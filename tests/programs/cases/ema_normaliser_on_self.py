# expect: freed_graph
# shape: a loss normalised by a running average kept on an object, updated from the loss with its graph
import torch
import torch.nn as nn


class RunningScale:
    def __init__(self, momentum=0.9):
        self.momentum = momentum
        self.avg = None

    def __call__(self, loss):
        if self.avg is None:
            self.avg = loss
        else:
            self.avg = self.momentum * self.avg + (1 - self.momentum) * loss
        return loss / (self.avg + 1e-8)


net = nn.Linear(4, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.01)
scale = RunningScale()
for step in range(3):
    loss = scale(net(torch.randn(8, 4)).pow(2).mean())
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
