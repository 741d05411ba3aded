# expect: inplace_version
# shape: a block's `negative_slope=0.0` default selects `nn.ReLU(inplace=True)` over LeakyReLU; applied to a sigmoid's output, it modifies what sigmoid saved
import torch
import torch.nn as nn


class GatedBlock(nn.Module):
    def __init__(self, dim, negative_slope=0.0):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.act = nn.ReLU(inplace=True) if negative_slope == 0.0 else nn.LeakyReLU(negative_slope)

    def forward(self, x):
        gate = torch.sigmoid(self.proj(x))
        return self.act(gate)


torch.manual_seed(0)
block = GatedBlock(4)
x = torch.randn(3, 4)
loss = block(x).sum()
loss.backward()  # raises
