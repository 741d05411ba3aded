# expect: nonscalar_backward
# shape: a config that is a dict subclass reading its items as attributes (`__getattr__ = dict.__getitem__`) says how many replicas split the batch; the runner stacks one loss per replica into a vector and backpropagates it unreduced
import torch
from torch import nn


class Config(dict):
    __getattr__ = dict.__getitem__


cfg = Config(model=Config(width=16, classes=3), gpus=[0, 1], lr=0.01, steps=2)


class Net(nn.Module):
    def __init__(self, width, classes):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, width), nn.ReLU(), nn.Linear(width, classes))

    def forward(self, x, y):
        return nn.functional.cross_entropy(self.body(x), y)


class Runner:
    def __init__(self, cfg):
        self.cfg = cfg
        self.net = Net(cfg.model.width, cfg.model.classes)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=cfg.lr)

    def replicated_loss(self, x, y):
        xs, ys = x.chunk(len(self.cfg.gpus)), y.chunk(len(self.cfg.gpus))
        return torch.stack([self.net(a, b) for a, b in zip(xs, ys)])

    def train(self):
        for _ in range(self.cfg.steps):
            x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
            loss = self.replicated_loss(x, y)
            self.opt.zero_grad()
            loss.backward()  # raises
            self.opt.step()


if __name__ == "__main__":
    torch.manual_seed(0)
    Runner(cfg).train()
