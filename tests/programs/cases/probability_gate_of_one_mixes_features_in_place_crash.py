# expect: inplace_version
# shape: feature-level CutMix gated by `np.random.rand(1) < cfg.mix_prob` with the probability set to 1.0, so the mix always runs; it writes a region of another sample into the output of an in-place ReLU, which that ReLU's backward needs
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn

cfg = SimpleNamespace(mix_prob=1.0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(inplace=True))
        self.head = nn.Linear(4, 2)
        self.mix = None

    def forward(self, x):
        x = self.stem(x)
        if self.mix is not None:
            x[:, :, 2:5, 2:5] = x[self.mix, :, 2:5, 2:5]
        return self.head(x.mean((2, 3)))


model = Net()
images = torch.randn(4, 3, 8, 8)
r = np.random.rand(1)
model.mix = None
if r < cfg.mix_prob:
    model.mix = torch.randperm(4)
loss = model(images).pow(2).mean()
loss.backward()  # raises
