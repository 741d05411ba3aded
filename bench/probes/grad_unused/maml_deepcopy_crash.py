# expect: grad_unused
# source: https://github.com/vmikulik/maml-pytorch/issues/2
import copy
import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
random.seed(0)


def sine_task(k=10):
    amp, phase = random.uniform(0.1, 5.0), random.uniform(0, math.pi)
    x = torch.rand(2 * k, 1) * 10 - 5
    y = amp * torch.sin(x + phase)
    return (x[:k], y[:k]), (x[k:], y[k:])


class RestorationNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(1, 40), nn.ReLU(), nn.Linear(40, 40), nn.ReLU(), nn.Linear(40, 1))

    def forward(self, x):
        return self.body(x)


model = RestorationNet()
weights = list(model.parameters())
meta_optimiser = torch.optim.Adam(weights, lr=1e-3)
inner_lr, inner_steps, tasks_per_meta_batch = 0.01, 1, 4

for it in range(3):
    meta_loss = 0.0
    for _ in range(tasks_per_meta_batch):
        (xs, ys), (xq, yq) = sine_task()
        fast_model = copy.deepcopy(model)
        temp_weights = list(fast_model.parameters())
        for _ in range(inner_steps):
            loss = F.mse_loss(fast_model(xs), ys)
            grads = torch.autograd.grad(loss, temp_weights)
            with torch.no_grad():
                for w, g in zip(temp_weights, grads):
                    w -= inner_lr * g
        meta_loss = meta_loss + F.mse_loss(fast_model(xq), yq)
    meta_loss = meta_loss / tasks_per_meta_batch
    meta_grads = torch.autograd.grad(meta_loss, weights)  # raises
    for w, g in zip(weights, meta_grads):
        w.grad = g
    meta_optimiser.step()
    print(it, meta_loss.item())
