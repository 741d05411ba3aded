# expect: leaf_inplace
# shape: the same reset written over `model.parameters()`: zero_() on a leaf that requires grad, outside no_grad
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for p in model.parameters():
        p.zero_()  # raises
    for step in range(2):
        x, y = torch.randn(8, 4), torch.randn(8, 1)
        loss = (model(x) - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
