# expect: inplace_version
# shape: the BatchNorm buffers zeroed between forward and backward: batch_norm saved running_mean/var for its backward
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    loss = (model(x) - y).pow(2).mean()
    for b in model.buffers():
        b.zero_()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
