# expect: clean
# source: https://github.com/kwea123/ngp_pl/issues/100
"""NeRF training with joint extrinsics refinement (ngp_pl-style NeRFSystem), CPU version.

datasets/base.py + datasets/ray_utils.py + train.py condensed: the system keeps the training
poses in a buffer, learns per-image axis-angle / translation corrections (dR, dT) with a
separate optimizer, and samples rays either from all images or from one image per step.
The hash-grid NGP and CUDA ray marcher are replaced by a positional-encoding MLP and a
uniform-sample volume renderer.  Mixed precision (precision=16 in the original Lightning
run) is emulated with CPU bf16 autocast.
"""
import argparse
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.lr_scheduler import CosineAnnealingLR
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(0)
np.random.seed(0)


def get_opts(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument('--scale', type=float, default=0.5)
    parser.add_argument('--batch_size', type=int, default=256)
    parser.add_argument('--ray_sampling_strategy', type=str, default='all_images',
                        choices=['all_images', 'same_image'])
    parser.add_argument('--num_epochs', type=int, default=2)
    parser.add_argument('--steps_per_epoch', type=int, default=3)
    parser.add_argument('--lr', type=float, default=1e-2)
    parser.add_argument('--optimize_ext', action='store_true', default=False)
    parser.add_argument('--precision', type=str, default='32', choices=['32', 'bf16'])
    parser.add_argument('--n_samples', type=int, default=24)
    return parser.parse_args(argv)


# ------------------------------------------------------------------ datasets/ray_utils.py
def get_ray_directions(H, W, K):
    v, u = torch.meshgrid(torch.arange(H, dtype=torch.float32), torch.arange(W, dtype=torch.float32),
                          indexing='ij')
    fx, fy, cx, cy = K[0, 0], K[1, 1], K[0, 2], K[1, 2]
    directions = torch.stack([(u - cx + 0.5) / fx, (v - cy + 0.5) / fy, torch.ones_like(u)], -1)
    return directions.reshape(-1, 3)


def get_rays(directions, c2w):
    """directions: (N, 3) in camera frame; c2w: (3, 4) or (N, 3, 4)."""
    if c2w.ndim == 2:
        rays_d = directions @ c2w[:, :3].T
    else:
        rays_d = (directions[:, None, :] @ c2w[..., :3].transpose(-1, -2))[:, 0]
    rays_o = c2w[..., 3].expand_as(rays_d)
    return rays_o, rays_d


def axisangle_to_R(v):
    """Axis-angle (3) or (B, 3) to rotation matrix, Rodrigues formula (from nerfmm)."""
    v_ndim = v.ndim
    if v_ndim == 1:
        v = v[None]
    zero = torch.zeros_like(v[:, :1])
    skew_v0 = torch.cat([zero, -v[:, 2:3], v[:, 1:2]], 1)
    skew_v1 = torch.cat([v[:, 2:3], zero, -v[:, 0:1]], 1)
    skew_v2 = torch.cat([-v[:, 1:2], v[:, 0:1], zero], 1)
    skew_v = torch.stack([skew_v0, skew_v1, skew_v2], dim=1)  # (B, 3, 3)
    norm_v = torch.norm(v, dim=1)[:, None, None] + 1e-7
    eye = torch.eye(3, device=v.device)
    R = eye + (torch.sin(norm_v) / norm_v) * skew_v + \
        ((1 - torch.cos(norm_v)) / norm_v ** 2) * (skew_v @ skew_v)
    return R[0] if v_ndim == 1 else R


# ------------------------------------------------------------------ datasets/base.py
class BaseDataset(Dataset):
    """Define length and sampling method"""

    def __init__(self, split='train'):
        self.split = split

    def __len__(self):
        if self.split.startswith('train'):
            return 1000
        return len(self.poses)

    def __getitem__(self, idx):
        if self.split.startswith('train'):
            # training pose is retrieved in train.py
            if self.ray_sampling_strategy == 'all_images':  # randomly select images
                img_idxs = np.random.choice(len(self.poses), self.batch_size)
            elif self.ray_sampling_strategy == 'same_image':  # randomly select ONE image
                img_idxs = np.random.choice(len(self.poses), 1)
            # randomly select pixels
            pix_idxs = np.random.choice(self.img_wh[0] * self.img_wh[1], self.batch_size)
            rays = self.rays[img_idxs, pix_idxs]
            return {'img_idxs': img_idxs, 'pix_idxs': pix_idxs, 'rgb': rays[:, :3]}
        return {'pose': self.poses[idx], 'img_idxs': idx, 'rgb': self.rays[idx][:, :3]}


class SyntheticOrbitDataset(BaseDataset):
    """Images of a procedural coloured blob seen from cameras on a circle."""

    def __init__(self, split='train', n_images=6, img_wh=(16, 16)):
        super().__init__(split)
        self.img_wh = img_wh
        w, h = img_wh
        self.K = torch.tensor([[20.0, 0, w / 2], [0, 20.0, h / 2], [0, 0, 1]])
        self.directions = get_ray_directions(h, w, self.K)
        poses = []
        for theta in np.linspace(0, 2 * np.pi, n_images, endpoint=False) + (0.3 if split == 'test' else 0.0):
            cam = np.array([1.2 * np.cos(theta), 1.2 * np.sin(theta), 0.3])
            forward = -cam / np.linalg.norm(cam)
            right = np.cross(forward, [0, 0, 1.0]); right /= np.linalg.norm(right)
            down = np.cross(forward, right)
            poses.append(np.stack([right, down, forward, cam], 1))
        self.poses = torch.tensor(np.stack(poses), dtype=torch.float32)  # (N, 3, 4)
        rgbs = []
        for c2w in self.poses:
            o, d = get_rays(self.directions, c2w)
            t = (-(o * d).sum(-1) / (d * d).sum(-1)).clamp(min=0)
            closest = o + t[:, None] * d
            rgbs.append(torch.sigmoid(4 * closest) * torch.exp(-3 * closest.norm(dim=-1, keepdim=True)))
        self.rays = torch.stack(rgbs)  # (N_images, H*W, 3)


# ------------------------------------------------------------------ models
class NGP(nn.Module):
    def __init__(self, scale, n_freqs=6, width=64):
        super().__init__()
        self.scale, self.n_freqs = scale, n_freqs
        in_dim = 3 + 6 * n_freqs
        self.xyz_encoder = nn.Sequential(nn.Linear(in_dim, width), nn.ReLU(), nn.Linear(width, 16))
        self.rgb_net = nn.Sequential(nn.Linear(16 + 3, width), nn.ReLU(), nn.Linear(width, 3), nn.Sigmoid())

    def encode(self, x):
        freqs = 2.0 ** torch.arange(self.n_freqs, dtype=x.dtype)
        xb = x[..., None] * freqs * math.pi
        return torch.cat([x, torch.sin(xb).flatten(-2), torch.cos(xb).flatten(-2)], -1)

    def forward(self, x, d):
        h = self.xyz_encoder(self.encode(x / self.scale))
        sigmas = F.softplus(h[..., 0])
        rgbs = self.rgb_net(torch.cat([h, F.normalize(d, dim=-1)], -1))
        return sigmas, rgbs


def render(model, rays_o, rays_d, n_samples, near=0.2, far=2.2):
    t = torch.linspace(near, far, n_samples)
    pts = rays_o[:, None] + rays_d[:, None] * t[None, :, None]
    sigmas, rgbs = model(pts, rays_d[:, None].expand_as(pts))
    deltas = torch.full_like(sigmas, (far - near) / n_samples)
    alphas = 1 - torch.exp(-sigmas * deltas)
    trans = torch.cumprod(torch.cat([torch.ones_like(alphas[:, :1]), 1 - alphas + 1e-10], -1), -1)[:, :-1]
    ws = alphas * trans
    return {'rgb': (ws[..., None] * rgbs).sum(1), 'opacity': ws.sum(1), 'depth': (ws * t).sum(1)}


class NeRFLoss(nn.Module):
    def __init__(self, lambda_opacity=1e-3):
        super().__init__()
        self.lambda_opacity = lambda_opacity

    def forward(self, results, target):
        d = {'rgb': (results['rgb'].float() - target['rgb']) ** 2}
        o = results['opacity'].float() + 1e-10
        # encourage opacity to be either 0 or 1 to avoid floater
        d['opacity'] = self.lambda_opacity * (-o * torch.log(o))
        return d


# ------------------------------------------------------------------ train.py
class NeRFSystem(nn.Module):
    def __init__(self, hparams):
        super().__init__()
        self.hparams = hparams
        self.loss = NeRFLoss()
        self.model = NGP(scale=hparams.scale)

    def forward(self, batch, split):
        if split == 'train':
            poses = self.poses[batch['img_idxs']]
            directions = self.directions[batch['pix_idxs']]
        else:
            poses = batch['pose']
            directions = self.directions

        if self.hparams.optimize_ext:
            dR = axisangle_to_R(self.dR[batch['img_idxs']])
            poses[..., :3] = dR @ poses[..., :3]
            poses[..., 3] += self.dT[batch['img_idxs']]

        rays_o, rays_d = get_rays(directions, poses)
        return render(self.model, rays_o, rays_d, self.hparams.n_samples)

    def setup(self):
        self.train_dataset = SyntheticOrbitDataset(split='train')
        self.train_dataset.batch_size = self.hparams.batch_size
        self.train_dataset.ray_sampling_strategy = self.hparams.ray_sampling_strategy
        self.test_dataset = SyntheticOrbitDataset(split='test')

    def configure_optimizers(self):
        self.register_buffer('directions', self.train_dataset.directions)
        self.register_buffer('poses', self.train_dataset.poses)
        if self.hparams.optimize_ext:
            N = len(self.train_dataset.poses)
            self.register_parameter('dR', nn.Parameter(torch.zeros(N, 3)))
            self.register_parameter('dT', nn.Parameter(torch.zeros(N, 3)))
        net_params = [p for n, p in self.named_parameters() if n not in ['dR', 'dT']]
        self.net_opt = torch.optim.Adam(net_params, self.hparams.lr, eps=1e-15)
        opts = [self.net_opt]
        if self.hparams.optimize_ext:
            opts += [torch.optim.Adam([self.dR, self.dT], 1e-6)]  # learning rate is hard-coded
        total = self.hparams.num_epochs * self.hparams.steps_per_epoch
        return opts, [CosineAnnealingLR(self.net_opt, total, self.hparams.lr / 30)]

    def training_step(self, batch):
        results = self(batch, split='train')
        loss_d = self.loss(results, batch)
        return sum(lo.mean() for lo in loss_d.values()), results

    @torch.no_grad()
    def validation_step(self, batch):
        results = self(batch, split='test')
        mse = F.mse_loss(results['rgb'].float(), batch['rgb'])
        return -10.0 * torch.log10(mse)


def fit(system, hparams):
    system.setup()
    opts, schedulers = system.configure_optimizers()
    loader = DataLoader(system.train_dataset, batch_size=None, num_workers=0)
    use_amp = hparams.precision == 'bf16'
    it = iter(loader)
    for epoch in range(hparams.num_epochs):
        system.train()
        for step in range(hparams.steps_per_epoch):
            batch = next(it)
            for opt in opts:
                opt.zero_grad()
            with torch.autocast('cpu', dtype=torch.bfloat16, enabled=use_amp):
                loss, results = system.training_step(batch)
            loss.backward()
            for opt in opts:
                opt.step()
            for sch in schedulers:
                sch.step()
        system.eval()
        psnrs = [system.validation_step(system.test_dataset[i]).item() for i in range(2)]
        print(f'epoch {epoch}: loss={loss.item():.4f} val_psnr={np.mean(psnrs):.2f}')


if __name__ == '__main__':
    hparams = get_opts(['--ray_sampling_strategy', 'same_image', '--optimize_ext', '--precision', 'bf16'])
    fit(NeRFSystem(hparams), hparams)
