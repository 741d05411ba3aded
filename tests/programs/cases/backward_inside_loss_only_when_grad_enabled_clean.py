# expect: clean
# shape: a cached-gradient loss runs its own backward per mini-batch only when `torch.is_grad_enabled()`; evaluation calls it under no_grad, where it takes the plain branch, so no backward runs on a loss without a graph
import torch
from torch import nn


class CachedLoss(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x, y):
        pred = self.model(x)
        loss = nn.functional.mse_loss(pred, y)
        if torch.is_grad_enabled():
            loss.backward()
            loss = loss.detach()
        return loss


torch.manual_seed(0)
model = nn.Linear(4, 1)
criterion = CachedLoss(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    opt.zero_grad()
    criterion(torch.randn(8, 4), torch.randn(8, 1))
    opt.step()
with torch.no_grad():
    val = criterion(torch.randn(8, 4), torch.randn(8, 1))
print(float(val))
