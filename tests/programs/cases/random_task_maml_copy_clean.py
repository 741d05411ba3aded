# expect: clean
# shape: the same first-order MAML on sine tasks whose amplitude and phase come from the random module: each task adapts a deep copy of the model, and the meta-gradient is taken with respect to the copies' weights, which the meta-loss uses
import copy
import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F


def sine_task(k=5):
    amp, phase = random.uniform(0.1, 5.0), random.uniform(0, math.pi)
    x = torch.rand(2 * k, 1) * 10 - 5
    y = amp * torch.sin(x + phase)
    return (x[:k], y[:k]), (x[k:], y[k:])


model = nn.Sequential(nn.Linear(1, 16), nn.ReLU(), nn.Linear(16, 1))
weights = list(model.parameters())
meta_opt = torch.optim.Adam(weights, lr=1e-3)
for it in range(2):
    meta_loss = 0.0
    for _ in range(1):
        (xs, ys), (xq, yq) = sine_task()
        fast = copy.deepcopy(model)
        inner = list(fast.parameters())
        grads = torch.autograd.grad(F.mse_loss(fast(xs), ys), inner)
        with torch.no_grad():
            for w, g in zip(inner, grads):
                w -= 0.01 * g
        meta_loss = meta_loss + F.mse_loss(fast(xq), yq)
    meta_grads = torch.autograd.grad(meta_loss, inner)
    for w, g in zip(weights, meta_grads):
        w.grad = g
    meta_opt.step()
