# expect: clean
# shape: overfit-one-batch: a batch taken from a DataLoader once before the loop, reused every step
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
xb, yb = next(iter(loader))
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for step in range(5):
    loss = nn.functional.mse_loss(model(xb), yb)
    opt.zero_grad()
    loss.backward()
    opt.step()
