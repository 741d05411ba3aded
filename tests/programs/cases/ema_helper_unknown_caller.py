# expect: clean
# shape: an EMA helper updates parameters in place; its callers (elsewhere) run it under no_grad
import copy

import torch
import torch.nn as nn


def ema_update(ema: nn.Module, model: nn.Module, decay: float = 0.99) -> None:
    for e, p in zip(ema.parameters(), model.parameters()):
        e.mul_(decay).add_(p, alpha=1 - decay)


class Ema:
    def __init__(self, model):
        self.module = copy.deepcopy(model)
        for p in self.module.parameters():
            p.detach_()

    def update(self, model):
        for e, p in zip(self.module.parameters(), model.parameters()):
            e.mul_(0.99).add_(p.data, alpha=0.01)


torch.manual_seed(0)
net = nn.Linear(3, 3)
ema = Ema(net)
ema.update(net)
