# expect: requires_grad_nonleaf
# shape: a weight-dropped layer sets its weight to `F.dropout(raw, p, training=self.training)` on each forward; frozen after a forward in train mode, the weight is dropout's output (not a leaf) and `p.requires_grad = False` on the layer's tensors raises
import torch
import torch.nn as nn
import torch.nn.functional as F


class WeightDrop(nn.Module):
    def __init__(self, d_in, d_out, p=0.3):
        super().__init__()
        self.raw = nn.Parameter(torch.randn(d_out, d_in) * 0.1)
        self.p = p
        self.weight = None

    def forward(self, x):
        self.weight = F.dropout(self.raw, self.p, training=self.training)
        return x @ self.weight.t()


def freeze(tensors):
    for t in tensors:
        t.requires_grad = False  # raises


layer = WeightDrop(8, 4)
x = torch.randn(16, 8)
layer.train()
print(layer(x).shape)
freeze([layer.weight])
