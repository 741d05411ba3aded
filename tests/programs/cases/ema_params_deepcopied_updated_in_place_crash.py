# expect: leaf_inplace
# shape: EMA weights made by `copy.deepcopy` of the parameter list are new leaves that require grad; the EMA helper updates them in place with gradients recorded
import copy

import torch
import torch.nn as nn

model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
params = list(model.parameters())
ema_params = copy.deepcopy(params)
opt = torch.optim.AdamW(params, lr=1e-3)


def update_ema(target_params, source_params, rate=0.99):
    for targ, src in zip(target_params, source_params):
        targ.mul_(rate).add_(src, alpha=1 - rate)  # raises


for step in range(3):
    loss = model(torch.randn(2, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    update_ema(ema_params, params)
