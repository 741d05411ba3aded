# expect: clean
# shape: the twin of weight_drop_freeze_in_train_mode_crash.py whose last forward runs in eval mode: `F.dropout(raw, training=False)` returns `raw` itself, a leaf, which can be frozen
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
        t.requires_grad = False


layer = WeightDrop(8, 4)
x = torch.randn(16, 8)
layer.eval()
print(layer(x).shape)
freeze([layer.weight])
