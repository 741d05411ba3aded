import torch
import torch.nn as nn


class GatedBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        gate = torch.sigmoid(self.lin(x))
        gate *= 2.0
        return x * gate
