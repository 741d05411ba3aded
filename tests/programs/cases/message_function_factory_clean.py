# expect: clean
# shape: message functions made by a lambda that returns a lambda (`copy_src = lambda src, out: (lambda edges: {out: edges[src]})`), as graph libraries write them: the factory's parameters are closed over by the inner lambda
import torch
from torch import nn

copy_src = lambda src, out: (lambda edges: {out: edges[src]})  # noqa: E731


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.message = copy_src("h", "m")

    def forward(self, x):
        return self.message({"h": self.lin(x)})["m"]


layer = Layer()
loss = layer(torch.randn(2, 3)).sum()
loss.backward()
