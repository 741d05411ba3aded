# expect: clean
# shape: the same frozen backbone given a new linear head in place of the last layer: the new head is trained
import torch
import torch.nn as nn

backbone = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
for p in backbone.parameters():
    p.requires_grad = False
backbone[2] = nn.Linear(16, 4)
optimizer = torch.optim.SGD(backbone.parameters(), lr=0.1)
features = backbone(torch.randn(4, 8))
loss = features.pow(2).mean()
loss.backward()
