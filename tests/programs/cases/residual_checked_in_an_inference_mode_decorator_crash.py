# expect: no_grad_fn
# shape: a trainer's validation is wrapped by a `functools.wraps` decorator that runs it under `torch.inference_mode()` when the config asks (its default); the PDE residual inside re-enables grad with `torch.enable_grad()`, which inference mode ignores, so `autograd.grad` gets an output without a graph
import functools
from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class TrainerConfig:
    inference_mode: bool = True


def gradient(outputs, inputs):
    return torch.autograd.grad(outputs, inputs, grad_outputs=torch.ones_like(outputs), create_graph=True)[0]  # raises


def evaluation_context(fn):
    @functools.wraps(fn)
    def wrapper(trainer, *args, **kwargs):
        ctx = torch.inference_mode() if trainer.cfg.inference_mode else torch.no_grad()
        with ctx:
            return fn(trainer, *args, **kwargs)
    return wrapper


class Trainer:
    def __init__(self, cfg, net):
        self.cfg = cfg
        self.net = net

    @evaluation_context
    def validate(self, points):
        with torch.enable_grad():
            xt = points.clone().requires_grad_(True)
            u = self.net(xt)
            return gradient(u, xt).pow(2).mean().item()


trainer = Trainer(TrainerConfig(), nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 1)))
print(trainer.validate(torch.rand(32, 2)))
