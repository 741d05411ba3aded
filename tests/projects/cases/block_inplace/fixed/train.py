# expect: clean
# shape: a block defined in another module scales its sigmoid output in place
import torch
import torch.nn as nn

from blocks import GatedBlock

model = nn.Sequential(nn.Linear(6, 6), GatedBlock(6), nn.Linear(6, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(2):
    x, y = torch.randn(8, 6), torch.randn(8, 1)
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
