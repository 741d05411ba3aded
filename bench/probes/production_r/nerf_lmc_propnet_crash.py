# expect: freed_graph
# source: https://github.com/ubc-vision/nf-soft-mining/issues/1
"""Proposal-network NeRF trained with Langevin Monte Carlo pixel sampling.

Follows the nerfacc-based training script of the soft-mining project: rays are
generated from 2D pixel locations that carry gradients (so that the loss
gradient w.r.t. the pixel positions can drive the LMC sampler), a
PropNetEstimator samples along rays with density proposal networks and updates
them every few steps from the radiance field transmittance, and the radiance
field is trained with an importance-corrected photometric loss.  A tiny
synthetic multi-view scene replaces the Blender dataset.
"""
import argparse
import collections
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

Rays = collections.namedtuple("Rays", ("origins", "viewdirs"))


def get_proposal_requires_grad_fn(target: float = 5.0, num_steps: int = 1000):
    schedule = lambda s: min(s / num_steps, 1.0) * target
    steps_since_last_grad = 0

    def proposal_requires_grad_fn(step: int) -> bool:
        nonlocal steps_since_last_grad
        target_steps_since_last_grad = schedule(step)
        requires_grad = steps_since_last_grad > target_steps_since_last_grad
        if requires_grad:
            steps_since_last_grad = 0
        steps_since_last_grad += 1
        return requires_grad

    return proposal_requires_grad_fn


def render_transmittance_from_density(t_starts, t_ends, sigmas):
    sigmas_dt = sigmas * (t_ends - t_starts)
    trans = torch.exp(-torch.cumsum(torch.cat([torch.zeros_like(sigmas_dt[..., :1]), sigmas_dt[..., :-1]], -1), -1))
    alphas = 1.0 - torch.exp(-sigmas_dt)
    return trans, alphas


@torch.no_grad()
def importance_sampling(vals, cdfs, num_samples, stratified):
    n_rays = vals.shape[0]
    u = torch.linspace(0.0, 1.0, num_samples + 1).expand(n_rays, -1)
    if stratified:
        u = (u + (torch.rand_like(u) - 0.5) / num_samples).clamp(0.0, 1.0)
    cdfs = cdfs / cdfs[..., -1:].clamp_min(1e-6)
    idx = torch.searchsorted(cdfs.contiguous(), u.contiguous(), right=True).clamp(1, cdfs.shape[-1] - 1)
    c0, c1 = cdfs.gather(-1, idx - 1), cdfs.gather(-1, idx)
    v0, v1 = vals.gather(-1, idx - 1), vals.gather(-1, idx)
    new_vals = v0 + (u - c0) / (c1 - c0).clamp_min(1e-6) * (v1 - v0)
    return torch.sort(new_vals, dim=-1).values


class PropNetEstimator(nn.Module):
    def __init__(self, optimizer=None, scheduler=None):
        super().__init__()
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.prop_cache = []

    def sampling(self, prop_sigma_fns, prop_samples, num_samples, n_rays, near_plane, far_plane,
                 stratified=False, requires_grad=False):
        vals = torch.tensor([0.0, 1.0]).expand(n_rays, 2)
        cdfs = torch.tensor([0.0, 1.0]).expand(n_rays, 2)
        for level_fn, level_samples in zip(prop_sigma_fns, prop_samples):
            vals = importance_sampling(vals, cdfs, level_samples, stratified)
            t_vals = near_plane + vals * (far_plane - near_plane)
            t_starts, t_ends = t_vals[..., :-1], t_vals[..., 1:]
            with torch.set_grad_enabled(requires_grad):
                sigmas = level_fn(t_starts, t_ends)
                trans, _ = render_transmittance_from_density(t_starts, t_ends, sigmas)
                cdfs = 1.0 - torch.cat([trans, torch.zeros_like(trans[..., :1])], dim=-1)
                if requires_grad:
                    self.prop_cache.append((vals, cdfs))
        vals = importance_sampling(vals, cdfs.detach(), num_samples, stratified)
        t_vals = near_plane + vals * (far_plane - near_plane)
        if requires_grad:
            self.prop_cache.append((vals, None))
        return t_vals[..., :-1], t_vals[..., 1:]

    @torch.enable_grad()
    def update_every_n_steps(self, trans, requires_grad=False, loss_scaler=1.0):
        if requires_grad:
            return self._update(trans=trans, loss_scaler=loss_scaler)
        self.scheduler.step()
        return 0.0

    @torch.enable_grad()
    def _update(self, trans, loss_scaler=1.0):
        assert len(self.prop_cache) > 0
        target_vals, _ = self.prop_cache.pop()
        target_cdfs = (1.0 - torch.cat([trans, torch.zeros_like(trans[..., :1])], dim=-1)).detach()
        loss = 0.0
        while self.prop_cache:
            prop_vals, prop_cdfs = self.prop_cache.pop()
            with torch.no_grad():
                idx = torch.searchsorted(target_vals.contiguous(), prop_vals.contiguous()).clamp(0, target_vals.shape[-1] - 1)
                target_at_prop = target_cdfs.gather(-1, idx)
            loss = loss + (F.relu(target_at_prop - prop_cdfs) ** 2 / (prop_cdfs + 1e-3)).mean()
        self.optimizer.zero_grad()
        (loss * loss_scaler).backward()
        self.optimizer.step()
        self.scheduler.step()
        return loss.item()


def posenc(x, n_freqs):
    freqs = 2.0 ** torch.arange(n_freqs, dtype=x.dtype) * math.pi
    xb = x[..., None] * freqs
    return torch.cat([x, torch.sin(xb).flatten(-2), torch.cos(xb).flatten(-2)], -1)


class DensityField(nn.Module):
    def __init__(self, n_freqs=4, width=32):
        super().__init__()
        self.n_freqs = n_freqs
        self.mlp = nn.Sequential(nn.Linear(3 + 6 * n_freqs, width), nn.ReLU(), nn.Linear(width, 1))

    def forward(self, positions):
        return F.softplus(self.mlp(posenc(positions, self.n_freqs)) - 1.0)


class RadianceField(nn.Module):
    def __init__(self, n_freqs=6, width=64):
        super().__init__()
        self.n_freqs = n_freqs
        self.base = nn.Sequential(nn.Linear(3 + 6 * n_freqs, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU())
        self.sigma_head = nn.Linear(width, 1)
        self.rgb_head = nn.Sequential(nn.Linear(width + 3, width // 2), nn.ReLU(), nn.Linear(width // 2, 3))

    def forward(self, positions, directions):
        h = self.base(posenc(positions, self.n_freqs))
        sigmas = F.softplus(self.sigma_head(h) - 1.0)
        rgb = torch.sigmoid(self.rgb_head(torch.cat([h, directions], -1)))
        return rgb, sigmas


def rendering(t_starts, t_ends, rgb_sigma_fn, render_bkgd=None):
    rgbs, sigmas = rgb_sigma_fn(t_starts, t_ends)
    trans, alphas = render_transmittance_from_density(t_starts, t_ends, sigmas)
    weights = trans * alphas
    colors = (weights[..., None] * rgbs).sum(-2)
    opacities = weights.sum(-1, keepdim=True)
    depths = (weights * (t_starts + t_ends) / 2.0).sum(-1, keepdim=True)
    if render_bkgd is not None:
        colors = colors + render_bkgd * (1.0 - opacities)
    return colors, opacities, depths, {"weights": weights, "trans": trans}


def render_image_with_propnet(radiance_field, proposal_networks, estimator, rays, num_samples,
                              num_samples_per_prop, near_plane, far_plane, opaque_bkgd=False,
                              render_bkgd=None, proposal_requires_grad=False):
    chunk_rays = rays

    def prop_sigma_fn(t_starts, t_ends, proposal_network):
        t_origins = chunk_rays.origins[..., None, :]
        t_dirs = chunk_rays.viewdirs[..., None, :]
        positions = t_origins + t_dirs * (t_starts + t_ends)[..., None] / 2.0
        sigmas = proposal_network(positions)
        if opaque_bkgd:
            sigmas[..., -1, :] = torch.inf
        return sigmas.squeeze(-1)

    def rgb_sigma_fn(t_starts, t_ends):
        t_origins = chunk_rays.origins[..., None, :]
        t_dirs = chunk_rays.viewdirs[..., None, :].repeat_interleave(t_starts.shape[-1], dim=-2)
        positions = t_origins + t_dirs * (t_starts + t_ends)[..., None] / 2.0
        rgb, sigmas = radiance_field(positions, t_dirs)
        if opaque_bkgd:
            sigmas[..., -1, :] = torch.inf
        return rgb, sigmas.squeeze(-1)

    t_starts, t_ends = estimator.sampling(
        prop_sigma_fns=[lambda *args, p=p: prop_sigma_fn(*args, p) for p in proposal_networks],
        prop_samples=num_samples_per_prop, num_samples=num_samples, n_rays=chunk_rays.origins.shape[0],
        near_plane=near_plane, far_plane=far_plane, stratified=radiance_field.training,
        requires_grad=proposal_requires_grad)
    return rendering(t_starts, t_ends, rgb_sigma_fn, render_bkgd=render_bkgd)


class LMC:
    def __init__(self, num_rays, height, width, a=2e1, b=2e-2, minpct=0.1, generator=None):
        self.num_rays, self.a, self.b, self.g = num_rays, a, b, generator
        self.u_num = int(minpct * num_rays)
        self.prev_samples = torch.rand(num_rays, 2, generator=self.g)
        self.HW = torch.tensor([height - 1, width - 1], dtype=torch.float32)

    def __call__(self, net_grad=None, loss_per_pix=None):
        if net_grad is not None:
            with torch.no_grad():
                noise = torch.randn(self.num_rays, 2, generator=self.g)
                self.prev_samples.add_(net_grad * self.a + noise * self.b)
                self.prev_samples[-self.u_num:] = torch.rand(self.u_num, 2, generator=self.g)
                self.prev_samples.clamp_(min=0.0, max=1.0)
        return (self.prev_samples * self.HW).round()


class SyntheticScene:
    NEAR, FAR = 2.0, 6.0

    def __init__(self, num_rays=64, n_cams=3, size=12, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.HEIGHT = self.WIDTH = size
        self.num_rays = num_rays
        angles = torch.linspace(0, 2 * math.pi, n_cams + 1)[:-1]
        c2w = []
        for a in angles:
            R = torch.tensor([[math.cos(a), 0.0, math.sin(a)], [0.0, 1.0, 0.0], [-math.sin(a), 0.0, math.cos(a)]])
            c2w.append(torch.cat([R, (R @ torch.tensor([0.0, 0.0, 4.0]))[:, None]], 1))
        self.camtoworlds = torch.stack(c2w)
        self.K = torch.tensor([[size, 0, size / 2.0], [0, size, size / 2.0], [0, 0, 1]], dtype=torch.float32)
        yy, xx = torch.meshgrid(torch.linspace(-1, 1, size), torch.linspace(-1, 1, size), indexing="ij")
        blob = torch.exp(-(xx ** 2 + yy ** 2) * 3)[None, ..., None]
        tint = torch.rand(n_cams, 1, 1, 3, generator=g)
        self.images = torch.cat([blob * tint + (1 - blob), torch.ones(n_cams, size, size, 1)], -1)
        self.img_id = torch.arange(n_cams).repeat_interleave(num_rays // n_cams + 1)[:num_rays]
        self.lmc = LMC(num_rays, size, size, generator=g)

    def get_origin_viewdirs(self, image_id, y, x):
        c2w = self.camtoworlds[image_id]
        camera_dirs = F.pad(torch.stack([(x - self.K[0, 2] + 0.5) / self.K[0, 0],
                                         (y - self.K[1, 2] + 0.5) / self.K[1, 1] * -1.0], dim=-1),
                            (0, 1), value=-1.0)
        directions = (camera_dirs[:, None, :] * c2w[:, :3, :3]).sum(dim=-1)
        origins = torch.broadcast_to(c2w[:, :3, -1], directions.shape)
        viewdirs = directions / torch.linalg.norm(directions, dim=-1, keepdims=True)
        return origins, viewdirs

    def fetch_data_lmc(self, net_grad=None, loss_per_pix=None):
        points_2d = self.lmc(net_grad, loss_per_pix)
        rgba = self.images[self.img_id, points_2d[:, 0].long(), points_2d[:, 1].long()]
        points_2d.requires_grad = True
        x, y = points_2d[:, 1], points_2d[:, 0]
        origins, viewdirs = self.get_origin_viewdirs(self.img_id, y, x)
        pixels, alpha = torch.split(rgba, [3, 1], dim=-1)
        color_bkgd = torch.ones(3)
        pixels = pixels * alpha + color_bkgd * (1.0 - alpha)
        return {"pixels": pixels, "rays": Rays(origins=origins, viewdirs=viewdirs),
                "color_bkgd": color_bkgd, "points_2d": points_2d}


def main():
    args = argparse.Namespace(max_steps=4, sampling_type="lmc", alpha=0.8)
    torch.manual_seed(42)

    train_dataset = SyntheticScene()
    proposal_networks = [DensityField(), DensityField(n_freqs=5)]
    prop_optimizer = torch.optim.Adam([p for n in proposal_networks for p in n.parameters()], lr=1e-2, eps=1e-15)
    prop_scheduler = torch.optim.lr_scheduler.MultiStepLR(prop_optimizer, milestones=[args.max_steps // 2], gamma=0.33)
    estimator = PropNetEstimator(prop_optimizer, prop_scheduler)
    radiance_field = RadianceField()
    optimizer = torch.optim.Adam(radiance_field.parameters(), lr=1e-2, eps=1e-15)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[args.max_steps // 2], gamma=0.33)
    proposal_requires_grad_fn = get_proposal_requires_grad_fn()

    gradval, lossperpix_prev = None, None
    for step in range(args.max_steps + 1):
        radiance_field.train()
        data = train_dataset.fetch_data_lmc(net_grad=gradval, loss_per_pix=lossperpix_prev)
        rays, pixels = data["rays"], data["pixels"]

        proposal_requires_grad = proposal_requires_grad_fn(step)
        rgb, acc, depth, extras = render_image_with_propnet(
            radiance_field, proposal_networks, estimator, rays, num_samples=16,
            num_samples_per_prop=[16, 12], near_plane=train_dataset.NEAR, far_plane=train_dataset.FAR,
            render_bkgd=data["color_bkgd"], proposal_requires_grad=proposal_requires_grad)
        estimator.update_every_n_steps(extras["trans"], proposal_requires_grad, loss_scaler=1024)

        loss_per_pix = F.smooth_l1_loss(rgb, pixels, reduction="none").mean(-1)
        imp_loss = torch.abs(rgb - pixels).mean(-1).detach()
        correction = 1.0 / torch.clip(imp_loss, min=torch.finfo(torch.float16).eps)
        correction.pow_(min(step / 1000, args.alpha))
        correction.clamp_(min=0.2, max=correction.mean() + correction.std())
        loss_per_pix.mul_(correction)
        loss = loss_per_pix.mean()

        optimizer.zero_grad()
        loss.backward()  # raises
        optimizer.step()
        scheduler.step()

        with torch.no_grad():
            net_grad = data["points_2d"].grad.detach()
            loss_per_pix = loss_per_pix.detach()
            net_grad = net_grad / ((correction * loss_per_pix).unsqueeze(1) + torch.finfo(net_grad.dtype).eps)
            gradval, lossperpix_prev = net_grad / train_dataset.HEIGHT, loss_per_pix

        mse = F.mse_loss(rgb, pixels).item()
        print(f"step={step} | loss={mse:.5f} | psnr={-10.0 * math.log10(mse):.2f} | max_depth={depth.max().item():.3f}")


if __name__ == "__main__":
    main()
