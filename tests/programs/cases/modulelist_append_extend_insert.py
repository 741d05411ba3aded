# expect: clean
# shape: a ModuleList built with append/extend/insert; every ReLU(inplace=True) lands right after a Linear
import torch
import torch.nn as nn

torch.manual_seed(0)
layers = nn.ModuleList([nn.Linear(4, 8)])
layers.append(nn.ReLU(inplace=True))
layers.extend([nn.Linear(8, 8), nn.Linear(8, 1)])
layers.insert(3, nn.ReLU(inplace=True))
opt = torch.optim.SGD(layers.parameters(), lr=0.1)
for step in range(3):
    h = torch.randn(8, 4)
    for layer in layers:
        h = layer(h)
    loss = h.pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
