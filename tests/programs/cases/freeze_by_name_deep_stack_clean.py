# expect: clean
# shape: the head is kept trainable by name, so the loss has a graph
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.q, self.k, self.v, self.o = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        a = torch.softmax(self.q(x) @ self.k(x).transpose(-1, -2), dim=-1)
        return x + self.o(a @ self.v(x))


class Net(nn.Module):
    def __init__(self, d=8, depth=3):
        super().__init__()
        self.blocks = nn.ModuleList([Block(d) for _ in range(depth)])
        self.head = nn.Linear(d, 2)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean(1))


def freeze_module(model, keep="adapter"):
    for name, param in model.named_parameters():
        param.requires_grad = keep in name


torch.manual_seed(0)
model = Net()
freeze_module(model, keep="head")
loss = nn.functional.cross_entropy(model(torch.randn(4, 5, 8)), torch.tensor([0, 1, 1, 0]))
loss.backward()
