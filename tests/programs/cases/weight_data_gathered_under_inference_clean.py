# expect: clean
# shape: the twin of weight_data_gathered_under_inference_crash.py whose evaluation runs under `torch.no_grad()`: the gathered weight is an ordinary tensor
import torch
import torch.nn.functional as F
from torch import nn


class PartitionedLinear(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(0))
        self.shard = torch.randn(dim, dim)
        self.gathered = False

    def gather(self):
        if not self.gathered:
            self.weight.data = self.shard.clone()
            self.gathered = True

    def forward(self, x):
        self.gather()
        return F.linear(x, self.weight)


@torch.no_grad()
def evaluate(layer):
    return layer(torch.randn(2, 4)).mean()


torch.manual_seed(0)
layer = PartitionedLinear(4)
evaluate(layer)
x = torch.randn(3, 4, requires_grad=True)
loss = layer(x).pow(2).mean()
loss.backward()
