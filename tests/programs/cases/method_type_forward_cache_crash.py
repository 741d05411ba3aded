# expect: freed_graph
# shape: a block's forward is replaced with `types.MethodType(caching_forward, block)`, which keeps each output on the block; the next step's consistency term reads the previous output, whose graph the previous backward freed
import types

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.previous = self.last = None

    def forward(self, x):
        return self.lin(x)


def caching_forward(self, x):
    out = torch.tanh(self.lin(x))
    self.previous, self.last = self.last, out
    return out


def train(steps=3):
    torch.manual_seed(0)
    block = Block()
    block.forward = types.MethodType(caching_forward, block)
    opt = torch.optim.SGD(block.parameters(), lr=0.1)
    for _ in range(steps):
        out = block(torch.randn(2, 4))
        loss = out.pow(2).mean()
        if block.previous is not None:
            loss = loss + (out - block.previous).pow(2).mean()
        opt.zero_grad()
        loss.backward()  # raises
        opt.step()


if __name__ == "__main__":
    train()
