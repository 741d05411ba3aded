# expect: clean
# shape: the same cache filled during an evaluation under `torch.no_grad()`: the cached embedding is an ordinary tensor that backward may save
import torch
from torch import nn


class PositionEmbedding(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim
        self.cache = {}

    def forward(self, h, w):
        key = (h, w)
        if key not in self.cache:
            ys = torch.linspace(0, 1, h).view(h, 1).expand(h, w)
            xs = torch.linspace(0, 1, w).view(1, w).expand(h, w)
            self.cache[key] = torch.stack([ys, xs]).repeat(self.dim // 2, 1, 1)
        return self.cache[key]


class Detector(nn.Module):
    def __init__(self, dim=8):
        super().__init__()
        self.conv = nn.Conv2d(3, dim, 3, padding=1)
        self.pos = PositionEmbedding(dim)
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, x):
        feats = self.conv(x)
        pos = self.pos(4, 4)
        return (feats + self.scale * pos).mean()


def main():
    torch.manual_seed(0)
    model = Detector()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with torch.no_grad():
        model(torch.randn(1, 3, 4, 4))
    loss = model(torch.randn(2, 3, 4, 4))
    opt.zero_grad()
    loss.backward()
    opt.step()


if __name__ == "__main__":
    main()
