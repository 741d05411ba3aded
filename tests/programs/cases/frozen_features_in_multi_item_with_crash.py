# expect: requires_grad_nonleaf
# shape: an attack helper freezes what it is given with a project context manager listed first in a two-item `with`; the features it is given are computed, not leaves
import contextlib

import torch
import torch.nn as nn


@contextlib.contextmanager
def frozen(*tensors):
    states = [t.requires_grad for t in tensors]
    for t in tensors:
        t.requires_grad_(False)  # raises
    try:
        yield
    finally:
        for t, s in zip(tensors, states):
            t.requires_grad_(s)


def perturb(model, feats, target, eps=0.1):
    delta = torch.zeros_like(feats, requires_grad=True)
    with frozen(feats), torch.enable_grad():
        loss = nn.functional.cross_entropy(model(feats + delta), target)
        grad, = torch.autograd.grad(loss, delta)
    return (feats + eps * grad.sign()).detach()


torch.manual_seed(0)
frontend = nn.Linear(16, 8)
model = nn.Linear(8, 3)
wave = torch.randn(4, 16)
feats = frontend(wave)
print(perturb(model, feats, torch.tensor([0, 1, 2, 0])).shape)
