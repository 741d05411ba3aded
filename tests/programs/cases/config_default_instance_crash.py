# expect: freed_graph
# shape: a trainer whose `conf=Config()` default (one instance, made when the class is defined) turns on a feature cache: the features computed in the first step, with their graph, are reused by the second step's loss after the first backward freed that graph
import torch
from torch import nn


class Config:
    def __init__(self):
        self.cache_features = True
        self.steps = 3
        self.lr = 0.1


class Trainer:
    def __init__(self, model, conf=Config()):
        self.model = model
        self.conf = conf
        self.cached = None

    def features(self, x):
        if self.conf.cache_features and self.cached is not None:
            return self.cached
        self.cached = torch.relu(self.model(x))
        return self.cached

    def fit(self, x, y):
        opt = torch.optim.SGD(self.model.parameters(), lr=self.conf.lr)
        for _ in range(self.conf.steps):
            loss = (self.features(x) - y).pow(2).mean()
            opt.zero_grad()
            loss.backward()  # raises
            opt.step()
        return loss.item()


if __name__ == "__main__":
    torch.manual_seed(0)
    trainer = Trainer(nn.Linear(5, 3))
    print(trainer.fit(torch.randn(8, 5), torch.randn(8, 3)))
