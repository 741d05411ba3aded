# expect: inference_tensor
# shape: a partitioned linear layer gathers its full weight into `weight.data` before each forward and keeps it once gathered; the first gather happens in an evaluation run under `torch.inference_mode()`, so the weight's data is an inference tensor that training's linear cannot save
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
        return F.linear(x, self.weight)  # raises


@torch.inference_mode()
def evaluate(layer):
    return layer(torch.randn(2, 4)).mean()


torch.manual_seed(0)
layer = PartitionedLinear(4)
evaluate(layer)
x = torch.randn(3, 4, requires_grad=True)
loss = layer(x).pow(2).mean()
loss.backward()
