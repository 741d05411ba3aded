# expect: clean
# shape: EMA helper: parameters blended under no_grad, buffers copied outside it (buffers do not require grad)
import copy

import torch
import torch.nn as nn


def ema_update(ema, model, decay=0.9):
    with torch.no_grad():
        for e, p in zip(ema.parameters(), model.parameters()):
            e.mul_(decay).add_(p, alpha=1 - decay)
    for eb, b in zip(ema.buffers(), model.buffers()):
        eb.copy_(b)


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))
ema = copy.deepcopy(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    ema_update(ema, model)
