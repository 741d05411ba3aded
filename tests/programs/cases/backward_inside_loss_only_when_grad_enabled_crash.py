# expect: no_grad_fn
# shape: the twin of backward_inside_loss_only_when_grad_enabled_clean.py that tests `model.training` instead of the grad mode: evaluation under no_grad leaves the model in training mode, and the loss, without a graph, is backpropagated
import torch
from torch import nn


class CachedLoss(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x, y):
        pred = self.model(x)
        loss = nn.functional.mse_loss(pred, y)
        if self.model.training:
            loss.backward()  # raises
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
