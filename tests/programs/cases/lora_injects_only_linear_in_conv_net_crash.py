# expect: no_grad_fn
# shape: a LoRA-style injector freezes the base model and wraps every child that is an nn.Linear; the backbone is all convolutions, so nothing is wrapped and the loss has no trainable input
import torch
import torch.nn as nn


class Scaled(nn.Module):
    def __init__(self, base):
        super().__init__()
        self.base = base
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, x):
        return self.base(x) * self.scale


def inject(model, kind):
    for p in model.parameters():
        p.requires_grad_(False)
    for name, child in list(model.named_children()):
        if isinstance(child, kind):
            setattr(model, name, Scaled(child))
    return model


torch.manual_seed(0)
net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 3, padding=1))
net = inject(net, nn.Linear)
loss = net(torch.randn(2, 3, 8, 8)).pow(2).mean()
loss.backward()  # raises
