# expect: clean
# source: https://github.com/vmikulik/maml-pytorch/issues/2
import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call

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
names = [n for n, _ in model.named_parameters()]
weights = list(model.parameters())
meta_optimiser = torch.optim.Adam(weights, lr=1e-3)
inner_lr, inner_steps, tasks_per_meta_batch = 0.01, 1, 4

for it in range(3):
    meta_loss = 0.0
    for _ in range(tasks_per_meta_batch):
        (xs, ys), (xq, yq) = sine_task()
        temp_weights = [w.clone() for w in weights]
        for _ in range(inner_steps):
            loss = F.mse_loss(functional_call(model, dict(zip(names, temp_weights)), (xs,)), ys)
            grads = torch.autograd.grad(loss, temp_weights, create_graph=True)
            temp_weights = [w - inner_lr * g for w, g in zip(temp_weights, grads)]
        meta_loss = meta_loss + F.mse_loss(functional_call(model, dict(zip(names, temp_weights)), (xq,)), yq)
    meta_loss = meta_loss / tasks_per_meta_batch
    meta_grads = torch.autograd.grad(meta_loss, weights)
    for w, g in zip(weights, meta_grads):
        w.grad = g
    meta_optimiser.step()
    print(it, meta_loss.item())
