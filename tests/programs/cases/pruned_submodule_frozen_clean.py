# expect: clean
# shape: the same pruner masking the weight in place under `torch.no_grad()`: the parameter stays a leaf, and freezing it is allowed
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(nn.Linear(6, 6), nn.ReLU(), nn.Linear(6, 6))
        self.head = nn.Linear(6, 1)

    def forward(self, x):
        return self.head(self.blocks(x))


def apply_mask(model, path, keep=0.5):
    layer = model.get_submodule(path)
    mask = (torch.rand_like(layer.weight) < keep).float()
    with torch.no_grad():
        layer.weight.mul_(mask)


def freeze(model):
    for p in model.parameters():
        p.requires_grad = False


if __name__ == "__main__":
    torch.manual_seed(0)
    net = Net()
    apply_mask(net, "blocks.2")
    freeze(net)
    print(net(torch.randn(2, 6)).shape)
