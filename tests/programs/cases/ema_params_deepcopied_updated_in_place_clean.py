# expect: clean
# shape: the same helper under `@torch.no_grad()`
import copy

import torch
import torch.nn as nn

model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
params = list(model.parameters())
ema_params = copy.deepcopy(params)
opt = torch.optim.AdamW(params, lr=1e-3)


@torch.no_grad()
def update_ema(target_params, source_params, rate=0.99):
    for targ, src in zip(target_params, source_params):
        targ.mul_(rate).add_(src, alpha=1 - rate)


for step in range(3):
    loss = model(torch.randn(2, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    update_ema(ema_params, params)
