# expect: clean
# shape: the helper is given the module, whose parameters are leaves
import torch
import torch.nn as nn


def freeze(*items):
    """Stop gradients for modules' parameters and for tensors; returns how to undo it."""
    previous = []
    for item in items:
        if isinstance(item, nn.Module):
            item = list(item.parameters())
        elif isinstance(item, torch.Tensor):
            item = [item]
        for p in item:
            previous.append((p, p.requires_grad))
            p.requires_grad_(False)
    return previous


torch.manual_seed(0)
backbone = nn.Linear(8, 4)
images = torch.randn(5, 8)
features = backbone(images)
freeze(backbone)
loss = features.pow(2).mean()
