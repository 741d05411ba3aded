# expect: grad_unused
# source: https://github.com/zju3dv/mlp_maps/issues/5
"""Convolutional occupancy network on point clouds (ConvONet-style tri-plane decoder).

A PointNet encoder scatters per-point features onto three axis-aligned feature
planes, a small conv net refines them, and an MLP decodes the density/occupancy
of query points from features sampled on the planes at the query's normalised
coordinates.  Training combines occupancy BCE with a normal-alignment term that
uses the gradient of the density w.r.t. the normalised query points.  Data are
synthetic noisy spheres/boxes.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIG = {
    "data": {"n_points": 256, "n_queries": 512, "batch_size": 4, "noise": 0.01},
    "model": {"c_dim": 16, "hidden": 32, "plane_res": 16, "planes": ["xz", "xy", "yz"],
              "sample_mode": "nearest", "padding": 0.1},
    "train": {"lr": 1e-3, "steps": 6, "w_normal": 0.1, "eval_every": 3, "seed": 0},
}


def make_batch(cfg, g):
    """Half spheres, half cubes; occupancy labels for uniform query points."""
    b, n, q = cfg["batch_size"], cfg["n_points"], cfg["n_queries"]
    pts, queries, occ, normals = [], [], [], []
    for i in range(b):
        d = torch.randn(n, 3, generator=g)
        if i % 2 == 0:
            surf = 0.5 * d / d.norm(dim=1, keepdim=True)
        else:
            surf = 0.5 * d / d.abs().max(dim=1, keepdim=True).values
        pts.append(surf + cfg["noise"] * torch.randn(n, 3, generator=g))
        qp = torch.rand(q, 3, generator=g) * 1.2 - 0.6
        r = qp.norm(dim=1) if i % 2 == 0 else qp.abs().max(dim=1).values
        queries.append(qp)
        occ.append((r < 0.5).float())
        normals.append(F.normalize(qp, dim=1))
    return torch.stack(pts), torch.stack(queries), torch.stack(occ), torch.stack(normals)


def normalize_coordinate(p, plane, padding=0.1):
    """Project to a plane and map [-0.5-pad, 0.5+pad] to [0, 1)."""
    if plane == "xz":
        xy = p[..., [0, 2]]
    elif plane == "xy":
        xy = p[..., [0, 1]]
    else:
        xy = p[..., [1, 2]]
    xy_new = xy / (1 + padding + 10e-6) + 0.5
    return xy_new.clamp(0.0, 1.0 - 10e-6)


def coordinate2index(x, reso):
    x = (x * reso).long()
    return x[..., 0] + reso * x[..., 1]


class LocalPoolPointnet(nn.Module):
    def __init__(self, c_dim, hidden, reso, planes, padding):
        super().__init__()
        self.fc_pos = nn.Linear(3, hidden)
        self.block = nn.Sequential(nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.fc_c = nn.Linear(hidden, c_dim)
        self.reso, self.planes, self.padding = reso, planes, padding
        self.unet = nn.Sequential(nn.Conv2d(c_dim, c_dim, 3, padding=1), nn.ReLU(), nn.Conv2d(c_dim, c_dim, 3, padding=1))

    def generate_plane_features(self, p, c, plane):
        xy = normalize_coordinate(p.detach(), plane, self.padding)
        index = coordinate2index(xy, self.reso)
        b, n, c_dim = c.shape
        fea = c.new_zeros(b, c_dim, self.reso ** 2)
        count = c.new_zeros(b, 1, self.reso ** 2)
        fea.scatter_add_(2, index.unsqueeze(1).expand(-1, c_dim, -1), c.transpose(1, 2))
        count.scatter_add_(2, index.unsqueeze(1), torch.ones_like(index, dtype=c.dtype).unsqueeze(1))
        fea = (fea / count.clamp(min=1)).view(b, c_dim, self.reso, self.reso)
        return self.unet(fea)

    def forward(self, p):
        c = self.fc_c(self.block(self.fc_pos(p)))
        return {plane: self.generate_plane_features(p, c, plane) for plane in self.planes}


class PlaneDecoder(nn.Module):
    def __init__(self, c_dim, hidden, planes, padding, sample_mode):
        super().__init__()
        self.planes, self.padding, self.sample_mode = planes, padding, sample_mode
        self.fc_p = nn.Linear(3, hidden)
        self.fc_c = nn.Linear(c_dim, hidden)
        self.blocks = nn.Sequential(nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.fc_out = nn.Linear(hidden, 1)

    def sample_plane_feature(self, p, c, plane):
        xy = normalize_coordinate(p, plane, self.padding)
        if self.sample_mode == "nearest":
            reso = c.shape[-1]
            index = coordinate2index(xy, reso)
            flat = c.flatten(2)
            return flat.gather(2, index.unsqueeze(1).expand(-1, flat.shape[1], -1))
        vgrid = 2.0 * xy[:, :, None] - 1.0
        return F.grid_sample(c, vgrid, padding_mode="border", align_corners=True, mode="bilinear").squeeze(-1)

    def forward(self, p_norm, c_planes):
        feat = sum(self.sample_plane_feature(p_norm, c_planes[pl], pl) for pl in self.planes).transpose(1, 2)
        net = self.blocks(self.fc_c(feat) + self.fc_p(p_norm.detach()))
        return self.fc_out(net).squeeze(-1)


class ConvOccupancyNetwork(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        m = cfg["model"]
        self.encoder = LocalPoolPointnet(m["c_dim"], m["hidden"], m["plane_res"], m["planes"], m["padding"])
        self.decoder = PlaneDecoder(m["c_dim"], m["hidden"], m["planes"], m["padding"], m["sample_mode"])
        self.register_buffer("bbox_center", torch.zeros(3))
        self.register_buffer("bbox_scale", torch.ones(()))

    def to_norm(self, wpts):
        return (wpts - self.bbox_center) / self.bbox_scale

    def calculate_density(self, wpts, c_planes, with_gradient=False):
        if with_gradient:
            wpts.requires_grad_(True)
        norm = self.to_norm(wpts)
        sigma = self.decoder(norm, c_planes)
        if not with_gradient:
            return sigma, None
        d_output = torch.ones_like(sigma, requires_grad=False)
        gradients = torch.autograd.grad(outputs=sigma, inputs=norm, grad_outputs=d_output,  # raises
                                        create_graph=True, retain_graph=True, only_inputs=True)[0]
        return sigma, gradients

    def forward(self, points, queries, with_gradient=False):
        return self.calculate_density(queries, self.encoder(points), with_gradient)


class Trainer:
    def __init__(self, cfg, model):
        self.cfg = cfg
        self.model = model
        self.optimizer = torch.optim.Adam(model.parameters(), lr=cfg["train"]["lr"])
        self.scheduler = torch.optim.lr_scheduler.ExponentialLR(self.optimizer, gamma=0.95)

    def train_step(self, batch):
        points, queries, occ, normals = batch
        self.model.train()
        logits, grad = self.model(points, queries.clone(), with_gradient=True)
        loss_occ = F.binary_cross_entropy_with_logits(logits, occ)
        near = (occ > 0).float().unsqueeze(-1)
        loss_normal = ((1 - F.cosine_similarity(-grad, normals, dim=-1).unsqueeze(-1)) * near).mean()
        loss = loss_occ + self.cfg["train"]["w_normal"] * loss_normal
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        return loss.item()

    @torch.no_grad()
    def evaluate(self, batch):
        points, queries, occ, _ = batch
        self.model.eval()
        logits, _ = self.model(points, queries)
        pred = logits > 0
        inter = (pred & (occ > 0.5)).sum().item()
        union = (pred | (occ > 0.5)).sum().item()
        return inter / max(union, 1)


def main():
    torch.manual_seed(CONFIG["train"]["seed"])
    g = torch.Generator().manual_seed(CONFIG["train"]["seed"])
    model = ConvOccupancyNetwork(CONFIG)
    trainer = Trainer(CONFIG, model)
    val_batch = make_batch(CONFIG["data"], g)
    for step in range(1, CONFIG["train"]["steps"] + 1):
        loss = trainer.train_step(make_batch(CONFIG["data"], g))
        if step % CONFIG["train"]["eval_every"] == 0:
            print("step %d  loss %.4f  val IoU %.3f" % (step, loss, trainer.evaluate(val_batch)))


if __name__ == "__main__":
    main()
