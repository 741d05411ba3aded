# expect: clean
# shape: two instances of one Block class run through the same helper, which adds in place to the fresh output
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x)


def run(block, x):
    out = block(x)
    out += x
    return out


torch.manual_seed(0)
enc1, enc2 = Block(), Block()
opt = torch.optim.SGD(list(enc1.parameters()) + list(enc2.parameters()), lr=0.1)
for step in range(3):
    x = torch.randn(2, 4)
    loss = run(enc2, run(enc1, x)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
