# expect: nonscalar_backward
# shape: a margin loss built from `torch.norm(..., dim=1)` (torch's Python wrapper supplies `p`, so the norm is taken per row) and `x.norm(dim=1)` returns one value per sample; the trainer backpropagates it without reducing
import torch
from torch import nn


def margin_loss(anchor, positive, negative, margin=1.0):
    d_pos = torch.norm(anchor - positive, dim=1)
    d_neg = (anchor - negative).norm(dim=1)
    return torch.clamp(d_pos - d_neg + margin, min=0.0)


class Embedder(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 4))

    def forward(self, x):
        return self.net(x)


def train(steps=2):
    torch.manual_seed(0)
    model = Embedder()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(steps):
        a, p, n = torch.randn(8, 10), torch.randn(8, 10), torch.randn(8, 10)
        loss = margin_loss(model(a), model(p), model(n))
        opt.zero_grad()
        loss.backward()  # raises
        opt.step()


if __name__ == "__main__":
    train()
