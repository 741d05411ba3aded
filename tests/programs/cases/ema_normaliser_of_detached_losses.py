# expect: clean
# shape: the running average is updated from the detached loss
import torch
import torch.nn as nn


class RunningScale:
    def __init__(self, momentum=0.9):
        self.momentum = momentum
        self.avg = None

    def __call__(self, loss):
        if self.avg is None:
            self.avg = loss.detach()
        else:
            self.avg = self.momentum * self.avg + (1 - self.momentum) * loss.detach()
        return loss / (self.avg + 1e-8)


net = nn.Linear(4, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.01)
scale = RunningScale()
for step in range(3):
    loss = scale(net(torch.randn(8, 4)).pow(2).mean())
    opt.zero_grad()
    loss.backward()
    opt.step()
