# expect: grad_unused
# shape: an SDF's normals are taken by `autograd.grad(sdf, x)` where `x.requires_grad_(True)` comes only after the SDF was computed from `torch.cat([x] + feats)`: the graph reached the grid features, not `x`
import torch
import torch.nn as nn
import torch.nn.functional as F


class GridSDF(nn.Module):
    def __init__(self, levels=2, dim=4):
        super().__init__()
        self.grids = nn.ParameterList(nn.Parameter(torch.randn(1, dim, 8, 8) * 0.1) for _ in range(levels))
        self.mlp = nn.Sequential(nn.Linear(3 + levels * dim, 16), nn.Softplus(), nn.Linear(16, 1))

    def forward(self, p):
        uv = p[:, :2].view(1, -1, 1, 2)
        feats = [F.grid_sample(g, uv, align_corners=True).view(g.shape[1], -1).t() for g in self.grids]
        return self.mlp(torch.cat([p] + feats, dim=-1))


def sdf_gradient(model, x):
    sdf = model(x)
    x.requires_grad_(True)
    return torch.autograd.grad(sdf, x, torch.ones_like(sdf), create_graph=True)[0]  # raises


model = GridSDF()
points = torch.rand(32, 3) * 2 - 1
normals = sdf_gradient(model, points)
print(normals.shape)
