# expect: clean
# shape: the twin of model_built_from_registry_crash.py whose head scales its weight under `torch.no_grad()`: building it from the registry runs clean
import torch
from torch import nn


class Registry:
    def __init__(self, name):
        self.name = name
        self._modules = {}

    def register_module(self):
        def _register(cls):
            self._modules[cls.__name__] = cls
            return cls
        return _register

    def build(self, cfg):
        args = dict(cfg)
        cls = self._modules[args.pop("type")]
        return cls(**args)


HEADS = Registry("heads")


@HEADS.register_module()
class ScaledHead(nn.Module):
    def __init__(self, dim, scale=0.1):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim, 2))
        with torch.no_grad():
            self.weight.mul_(scale)

    def forward(self, x):
        return x @ self.weight


head = HEADS.build({"type": "ScaledHead", "dim": 4})
loss = head(torch.randn(3, 4)).sum()
loss.backward()
