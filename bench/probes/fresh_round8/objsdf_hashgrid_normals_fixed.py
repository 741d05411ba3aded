# expect: clean
# source: https://github.com/QianyiWu/objectsdf_plus/issues/10
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class DenseGridEncoding(nn.Module):
    """Multi-resolution feature grid (stand-in for the tcnn HashGrid), trilinearly interpolated."""
    def __init__(self, levels=(4, 8), feat=4):
        super().__init__()
        self.grids = nn.ParameterList([nn.Parameter(1e-2 * torch.randn(1, feat, r, r, r)) for r in levels])

    def forward(self, p):
        g = p.view(1, -1, 1, 1, 3)
        feats = [F.grid_sample(grid, g, align_corners=True).view(grid.shape[1], -1).t() for grid in self.grids]
        return torch.cat([p] + feats, dim=-1)


class SDFNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoding = DenseGridEncoding()
        self.mlp = nn.Sequential(nn.Linear(3 + 8, 32), nn.Softplus(beta=100), nn.Linear(32, 1 + 16))

    def forward(self, p):
        p_en = self.encoding(p)
        out = self.mlp(p_en)
        return out[:, :1], out[:, 1:]

    def sdf_gradient(self, sdf, x):
        x.requires_grad_(True)
        d_output = torch.ones_like(sdf, requires_grad=False)
        gradients = torch.autograd.grad(
            outputs=sdf, inputs=x, grad_outputs=d_output,
            create_graph=True, retain_graph=True, only_inputs=True)[0]
        return gradients


def sample_points(n_rays=16, n_samples=8):
    rays_o = torch.tensor([0.0, 0.0, -0.9]).expand(n_rays, 3)
    rays_d = F.normalize(torch.randn(n_rays, 3) * 0.2 + torch.tensor([0.0, 0.0, 1.0]), dim=-1)
    t = torch.linspace(0.1, 1.6, n_samples)
    return (rays_o[:, None] + rays_d[:, None] * t[None, :, None]).reshape(-1, 3).clamp(-1, 1)


model = SDFNetwork()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for it in range(3):
    p = sample_points()
    p.requires_grad_(True)
    sdf, feature = model(p)
    gradients = model.sdf_gradient(sdf, p)
    normals = F.normalize(gradients, dim=-1)
    target_sdf = p.norm(dim=-1, keepdim=True) - 0.5     # unit-sphere-like object
    eikonal = ((gradients.norm(2, dim=-1) - 1) ** 2).mean()
    loss = F.l1_loss(sdf, target_sdf) + 0.1 * eikonal + 1e-3 * feature.pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(it, loss.item(), normals.shape)
