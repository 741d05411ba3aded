# expect: inplace_version
# shape: the same two-instance helper, but Block ends in a sigmoid, whose saved output the helper's += overwrites
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return torch.sigmoid(self.lin(x))


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
    loss.backward()  # raises
    opt.step()
