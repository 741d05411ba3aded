# expect: clean
# shape: the same runner detaching the carried state after each step: each step backpropagates its own graph
import torch
import torch.nn as nn


class Stream:
    def __init__(self, n, dim):
        self.data = [(torch.randn(4, dim), torch.randn(4, dim)) for _ in range(n)]

    def __iter__(self):
        for x, y in self.data:
            yield x, y


class Runner:
    def __init__(self, dim):
        self.cell = nn.GRUCell(dim, dim)
        self.optimizer = torch.optim.Adam(self.cell.parameters(), lr=1e-3)
        self.hx = None

    def train_step(self, x, y):
        self.optimizer.zero_grad()
        hx = self.cell(x, self.hx)
        loss = (hx - y).pow(2).mean()
        loss.backward()
        self.optimizer.step()
        self.hx = hx.detach()
        return loss.item()

    def fit(self, stream):
        losses = [self.train_step(x, y) for x, y in stream]
        return sum(losses) / max(len(losses), 1)


print(Runner(8).fit(Stream(3, 8)))
