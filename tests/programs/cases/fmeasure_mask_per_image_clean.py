# expect: clean
# shape: the per-image losses are averaged over the batch before backward
import torch
import torch.nn as nn


class SoftFMeasure(nn.Module):
    def __init__(self, beta=0.3, eps=1e-6):
        super().__init__()
        self.beta, self.eps = beta, eps

    def forward(self, prediction, target):
        n = prediction.size(0)
        tp = (prediction * target).view(n, -1).sum(dim=1)
        h = self.beta * target.view(n, -1).sum(dim=1) + prediction.view(n, -1).sum(dim=1)
        fmeasure = (1 + self.beta) * tp / (h + self.eps)
        return (1 - fmeasure).mean()


torch.manual_seed(0)
net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 1, 3, padding=1), nn.Sigmoid())
criterion = SoftFMeasure()
optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
for step in range(2):
    images = torch.rand(4, 3, 32, 32)
    target = (torch.rand(4, 1, 32, 32) >= 0.5).float()
    loss = criterion(net(images), target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
