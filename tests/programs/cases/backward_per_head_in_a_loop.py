# expect: freed_graph
# shape: one loss per head from one trunk output, each backpropagated in a loop over the losses
import torch
import torch.nn as nn

trunk = nn.Sequential(nn.Linear(6, 16), nn.ReLU())
heads = nn.ModuleList([nn.Linear(16, 1) for _ in range(3)])
opt = torch.optim.SGD(list(trunk.parameters()) + list(heads.parameters()), lr=0.01)
for start in range(2):
    x, y = torch.randn(8, 6), torch.randn(8, 3)
    feat = trunk(x)
    losses = [(head(feat).squeeze(1) - y[:, k]).pow(2).mean() for k, head in enumerate(heads)]
    opt.zero_grad()
    for loss in losses:
        loss.backward()  # raises
    opt.step()
