# expect: clean
# shape: the per-sample losses are averaged over the batch before backward
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
features, targets = torch.randn(64, 8), torch.randn(64, 1)
loader = DataLoader(TensorDataset(features, targets), batch_size=16, shuffle=True)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(2):
    for xb, yb in loader:
        per_sample = F.smooth_l1_loss(model(xb), yb, reduction="none").squeeze(1)
        optimizer.zero_grad()
        per_sample.mean().backward()
        optimizer.step()
