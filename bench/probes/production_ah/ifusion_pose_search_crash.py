# expect: leaf_inplace
# source: https://github.com/chinhsuanwu/ifusion/issues/4
"""Relative camera-pose search by inverting a view-conditioned generator.

Mirrors iFusion's optimize_pose / optimize_pose_pair / optimize_pose_loop: for
each initial (lat, lon, radius) guess, an se(3) perturbation xi is optimized
with Adam + ReduceLROnPlateau so that a frozen novel-view model reproduces the
query view from the reference view (and vice versa). A tiny conv model and
synthetic seeded images stand in for Zero123.
"""
import math
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

args = SimpleNamespace(
    optimizer=SimpleNamespace(name="Adam", lr=1e-1),
    scheduler=SimpleNamespace(name="ReduceLROnPlateau", patience=2, factor=0.5),
    max_step=8, default_radius=1.0, search_radius_range=0.3, use_step_ratio=True,
    init_latlon=[[0.0, 0.0, 1.0], [0.0, 90.0, 1.0], [0.0, 180.0, 1.0]], image_size=16, seed=0,
)


# ---------------------------------------------------------------- pose utils
def skew(v):
    zero = v.new_zeros(())
    return torch.stack([
        torch.stack([zero, -v[2], v[1]]),
        torch.stack([v[2], zero, -v[0]]),
        torch.stack([-v[1], v[0], zero]),
    ])


def so3_exp(phi):
    angle = phi.norm()
    K = skew(phi / angle.clamp_min(1e-8))
    eye = torch.eye(3)
    return eye + torch.sin(angle) * K + (1 - torch.cos(angle)) * (K @ K)


def se3_exp(xi):
    """se(3) -> SE(3) as a 4x4 matrix; xi = (rho, phi)."""
    rho, phi = xi[:3], xi[3:]
    # keep tiny rotations numerically exact
    phi[phi.abs() < 1e-7] = 0.0  # raises
    R = so3_exp(phi)
    top = torch.cat([R, rho.unsqueeze(1)], dim=1)
    bottom = torch.tensor([[0.0, 0.0, 0.0, 1.0]])
    return torch.cat([top, bottom], dim=0)


def latlon2mat(latlon):
    lat, lon, r = [math.radians(latlon[0]), math.radians(latlon[1]), latlon[2]]
    cam = torch.tensor([r * math.cos(lat) * math.sin(lon), r * math.sin(lat), r * math.cos(lat) * math.cos(lon)])
    T = torch.eye(4)
    T[:3, 3] = cam
    return T


def mat2latlon(T):
    t = T[:3, 3]
    r = t.norm()
    theta = torch.asin((t[1] / r).clamp(-1, 1))
    azimuth = torch.atan2(t[0], t[2])
    return theta, azimuth, r


def make_T(theta, azimuth, distance):
    return torch.stack([theta, torch.sin(azimuth), torch.cos(azimuth), distance])


# ---------------------------------------------------------------- model
class NovelViewModel(nn.Module):
    """Predicts the target view from a conditioning view and a relative pose T."""

    def __init__(self, size):
        super().__init__()
        self.pose_mlp = nn.Sequential(nn.Linear(4, 16), nn.SiLU(), nn.Linear(16, 3))
        self.net = nn.Sequential(nn.Conv2d(6, 8, 3, padding=1), nn.SiLU(), nn.Conv2d(8, 3, 3, padding=1))
        self.size = size

    @property
    def device(self):
        return next(self.parameters()).device

    def forward(self, batch, step_ratio=None):
        cond, target, T = batch["image_cond"], batch["image_target"], batch["T"]
        pose_map = self.pose_mlp(T)[:, :, None, None].expand(-1, -1, self.size, self.size)
        pred = self.net(torch.cat([cond, pose_map], dim=1))
        loss = F.mse_loss(pred, target)
        if step_ratio is not None:
            loss = loss * (1.0 + 0.5 * (1.0 - step_ratio))
        return loss


def parse_optimizer(cfg, params):
    return getattr(torch.optim, cfg.name)(params, lr=cfg.lr)


def parse_scheduler(cfg, optimizer):
    return torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=cfg.patience, factor=cfg.factor)


# ---------------------------------------------------------------- search
def optimize_pose_loop(model, image_cond, image_target, T, default_radius, search_radius_range,
                       use_step_ratio, args):
    xi = torch.randn(6) * 1e-6
    xi.requires_grad_()
    optimizer = parse_optimizer(args.optimizer, [xi])
    scheduler = parse_scheduler(args.scheduler, optimizer)
    total_loss = 0.0
    for step in range(args.max_step):
        optimizer.zero_grad()
        T_ = T @ se3_exp(xi)
        theta, azimuth, radius = mat2latlon(T_)
        distance = torch.sin(radius - default_radius) * search_radius_range
        idx = [0, 1] if torch.rand(1).item() < 0.5 else [1, 0]
        batch = {
            "image_cond": image_cond[idx],
            "image_target": image_target[idx],
            "T": torch.stack((make_T(theta, azimuth, distance), make_T(-theta, -azimuth, -distance)))[idx],
        }
        loss = model(batch, step_ratio=step / args.max_step) if use_step_ratio else model(batch)
        total_loss += loss.item()
        loss.backward()
        optimizer.step()
        scheduler.step(total_loss)
    return total_loss, theta.detach(), azimuth.detach(), distance.detach()


def optimize_pose_pair(model, ref_image, qry_image, init_latlon, args):
    image_cond = torch.cat((ref_image, qry_image))
    image_target = torch.cat((qry_image, ref_image))
    results = []
    for latlon in init_latlon:
        T = latlon2mat(latlon)
        total_loss, theta, azimuth, distance = optimize_pose_loop(
            model, image_cond, image_target, T, args.default_radius, args.search_radius_range,
            args.use_step_ratio, args)
        results.append((total_loss, math.degrees(theta.item()), math.degrees(azimuth.item()), distance.item()))
    results = torch.tensor(results)
    best = results[torch.argmin(results[:, 0])]
    print(f"[INFO] Best pose: theta: {best[1]:.2f}, azimuth: {best[2]:.2f}, distance: {best[3]:.2f}")
    return best[1:]


def main():
    torch.manual_seed(args.seed)
    model = NovelViewModel(args.image_size)
    model.requires_grad_(False)
    g = torch.Generator().manual_seed(args.seed)
    ref = torch.rand(1, 3, args.image_size, args.image_size, generator=g)
    qry = torch.roll(ref, shifts=3, dims=-1)
    pose = optimize_pose_pair(model, ref, qry, args.init_latlon, args)
    print("[INFO] pose:", [round(v, 3) for v in pose.tolist()])


if __name__ == "__main__":
    main()
