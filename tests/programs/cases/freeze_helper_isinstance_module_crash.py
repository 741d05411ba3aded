# expect: requires_grad_nonleaf
# shape: a helper freezes modules or tensors, turning a module into its parameters first; given a computed tensor, the isinstance(nn.Module) test is surely false and the tensor itself is frozen
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
            p.requires_grad_(False)  # raises
    return previous


torch.manual_seed(0)
backbone = nn.Linear(8, 4)
images = torch.randn(5, 8)
features = backbone(images)
freeze(features)
loss = features.pow(2).mean()
