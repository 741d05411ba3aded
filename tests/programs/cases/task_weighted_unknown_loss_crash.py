# expect: nonscalar_backward
# shape: per-task losses whose shapes the code does not state, weighted by learned precisions of shape (3,): the broadcast keeps three or more elements
import os

import torch
import torch.nn as nn
import torch.nn.functional as F


class UncertaintyWeighting(nn.Module):
    """Kendall et al.: each task loss scaled by a learned log-variance."""

    def __init__(self, n_tasks):
        super().__init__()
        self.log_vars = nn.Parameter(torch.zeros(n_tasks))

    def forward(self, task_losses):
        precision = torch.exp(-self.log_vars)
        return precision * task_losses + self.log_vars


torch.manual_seed(0)
loss_name = os.environ.get("TASK_LOSS", "mse_loss")
task_loss = getattr(F, loss_name)
heads = nn.ModuleList(nn.Linear(8, 1) for _ in range(3))
weighting = UncertaintyWeighting(3)
params = list(heads.parameters()) + list(weighting.parameters())
optimizer = torch.optim.SGD(params, lr=0.01)
x, ys = torch.randn(16, 8), [torch.randn(16, 1) for _ in range(3)]
losses = torch.stack([task_loss(head(x), y) for head, y in zip(heads, ys)])
total = weighting(losses)
optimizer.zero_grad()
total.backward()  # raises
optimizer.step()
