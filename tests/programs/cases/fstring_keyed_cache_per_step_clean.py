# expect: clean
# shape: positional features are cached under an f-string key that names the step, so each
# step computes its own (a cache never hit)
import torch
import torch.nn as nn


class Positions(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(1, dim)
        self.cache = {}

    def forward(self, length, offset=0, step=0):
        key = f"len:{length}|offset:{offset}|step:{step}"
        if key in self.cache:
            return self.cache[key]
        pos = self.proj(torch.arange(length, dtype=torch.float32)[:, None] + offset)
        self.cache[key] = pos
        return pos


torch.manual_seed(0)
positions = Positions(4)
encoder = nn.Linear(4, 4)
opt = torch.optim.SGD(list(positions.parameters()) + list(encoder.parameters()), lr=0.1)
for step in range(3):
    x = torch.randn(6, 4)
    loss = (encoder(x) + positions(6, step=step)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
