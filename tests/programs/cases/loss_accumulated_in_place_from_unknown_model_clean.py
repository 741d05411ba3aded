# expect: clean
# shape: a step function chosen by name from the configuration (so its arguments are unknown to the analysis) sums its loss in place: `loss += term` requires grad as soon as the term does
import os

import torch
import torch.nn as nn

torch.manual_seed(0)


def train_step(model, opt, x):
    loss = torch.tensor(0.0)
    loss += model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
step_fn = globals()[os.environ.get("STEP_FN", "train_step")]
for step in range(3):
    step_fn(model, opt, torch.randn(8, 4))
