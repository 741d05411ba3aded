# expect: clean
# source: https://github.com/dogyoonlee/DP-NeRF/issues/2
"""Deblurring NeRF with a physically-motivated rigid blurring kernel.

Each training image owns K learnable screw axes (w, v).  Rays are warped by the
corresponding SE(3) transforms, rendered with a small NeRF, and the K renders
are blended with learned weights to explain the blurry observation.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


# --------------------------------------------------------------------------
# rigid_warping utilities
# --------------------------------------------------------------------------
def skew(w):
    """Batch of 3-vectors -> skew-symmetric matrices."""
    zeros = torch.zeros_like(w[..., 0])
    return torch.stack([
        torch.stack([zeros, -w[..., 2], w[..., 1]], dim=-1),
        torch.stack([w[..., 2], zeros, -w[..., 0]], dim=-1),
        torch.stack([-w[..., 1], w[..., 0], zeros], dim=-1),
    ], dim=-2)


def exp_so3(w_hat, theta):
    """Rodrigues formula for a unit axis w_hat and angle theta."""
    W = skew(w_hat)
    eye = torch.eye(3).expand_as(W)
    s = torch.sin(theta)[..., None, None]
    c = torch.cos(theta)[..., None, None]
    return eye + s * W + (1.0 - c) * (W @ W)


def exp_se3(screw_axis):
    """screw_axis: [..., 6] = (w, v).  Returns R [..., 3, 3] and t [..., 3]."""
    w, v = screw_axis[..., :3], screw_axis[..., 3:]
    theta = torch.linalg.norm(w, dim=-1)
    theta = theta + 1.0e-10
    w_hat = w / theta[..., None]
    v_hat = v / theta[..., None]
    R = exp_so3(w_hat, theta)
    W = skew(w_hat)
    eye = torch.eye(3).expand_as(W)
    th = theta[..., None, None]
    G = eye * th + (1.0 - torch.cos(th)) * W + (th - torch.sin(th)) * (W @ W)
    t = (G @ v_hat[..., None])[..., 0]
    return R, t


def warp_rays(rays_o, rays_d, R, t):
    """rays_*: [N, 3]; R: [N, K, 3, 3]; t: [N, K, 3] -> [N, K, 3] each."""
    o = (R @ rays_o[:, None, :, None])[..., 0] + t
    d = (R @ rays_d[:, None, :, None])[..., 0]
    return o, F.normalize(d, dim=-1)


# --------------------------------------------------------------------------
# NeRF
# --------------------------------------------------------------------------
class Embedder:
    def __init__(self, n_freqs):
        self.freqs = 2.0 ** torch.arange(n_freqs)

    @property
    def out_dim(self):
        return 3 + 6 * len(self.freqs)

    def __call__(self, x):
        xb = x[..., None, :] * self.freqs[:, None]
        return torch.cat([x, torch.sin(xb).flatten(-2), torch.cos(xb).flatten(-2)], dim=-1)


class TinyNeRF(nn.Module):
    def __init__(self, embed, width=32):
        super().__init__()
        self.embed = embed
        self.net = nn.Sequential(nn.Linear(embed.out_dim, width), nn.ReLU(),
                                 nn.Linear(width, width), nn.ReLU(),
                                 nn.Linear(width, 4))

    def forward(self, pts):
        raw = self.net(self.embed(pts))
        return torch.sigmoid(raw[..., :3]), F.relu(raw[..., 3])


def volume_render(model, rays_o, rays_d, near, far, n_samples):
    t_vals = torch.linspace(near, far, n_samples)
    pts = rays_o[..., None, :] + rays_d[..., None, :] * t_vals[:, None]
    rgb, sigma = model(pts)
    dists = torch.cat([t_vals[1:] - t_vals[:-1], torch.tensor([1e10])])
    alpha = 1.0 - torch.exp(-sigma * dists)
    trans = torch.cumprod(torch.cat([torch.ones_like(alpha[..., :1]), 1.0 - alpha + 1e-10], dim=-1), dim=-1)[..., :-1]
    weights = alpha * trans
    return (weights[..., None] * rgb).sum(dim=-2)


class RigidBlurringKernel(nn.Module):
    def __init__(self, n_images, n_poses):
        super().__init__()
        self.n_poses = n_poses
        self.screw = nn.Parameter(torch.randn(n_images, n_poses, 6) * 1e-2)
        self.logits = nn.Parameter(torch.zeros(n_images, n_poses + 1))

    def forward(self, img_idx, rays_o, rays_d):
        R, t = exp_se3(self.screw[img_idx])
        o, d = warp_rays(rays_o, rays_d, R, t)
        return o, d, torch.softmax(self.logits[img_idx], dim=-1)


def synthetic_batch(args, gen):
    img_idx = torch.randint(0, args.n_images, (args.n_rays,), generator=gen)
    rays_o = torch.randn(args.n_rays, 3, generator=gen) * 0.1
    rays_d = F.normalize(torch.randn(args.n_rays, 3, generator=gen) + torch.tensor([0.0, 0.0, 1.0]), dim=-1)
    target = torch.rand(args.n_rays, 3, generator=gen)
    return img_idx, rays_o, rays_d, target


def train(args):
    gen = torch.Generator().manual_seed(args.seed)
    nerf = TinyNeRF(Embedder(args.multires))
    kernel = RigidBlurringKernel(args.n_images, args.n_poses)
    optimizer = torch.optim.Adam([
        {"params": nerf.parameters(), "lr": args.lrate},
        {"params": kernel.parameters(), "lr": args.lrate_kernel},
    ])
    for it in range(1, args.n_iters + 1):
        img_idx, rays_o, rays_d, target = synthetic_batch(args, gen)
        o_k, d_k, w_k = kernel(img_idx, rays_o, rays_d)
        rgb_sharp = volume_render(nerf, rays_o, rays_d, args.near, args.far, args.n_samples)
        rgb_k = volume_render(nerf, o_k, d_k, args.near, args.far, args.n_samples)
        rgb_blur = w_k[:, :1] * rgb_sharp + (w_k[:, 1:, None] * rgb_k).sum(dim=1)
        img_loss = F.mse_loss(rgb_blur, target)
        loss = img_loss + args.align_w * F.mse_loss(rgb_k.mean(dim=1), rgb_sharp.detach())
        psnr = -10.0 * torch.log10(img_loss.detach())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if it % args.i_print == 0:
            print(f"[TRAIN] Iter: {it} Loss: {loss.item():.5f}  PSNR: {psnr.item():.3f}")


def config_parser():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n_images", type=int, default=4)
    parser.add_argument("--n_poses", type=int, default=3)
    parser.add_argument("--n_rays", type=int, default=64)
    parser.add_argument("--n_samples", type=int, default=16)
    parser.add_argument("--multires", type=int, default=4)
    parser.add_argument("--near", type=float, default=2.0)
    parser.add_argument("--far", type=float, default=6.0)
    parser.add_argument("--lrate", type=float, default=5e-4)
    parser.add_argument("--lrate_kernel", type=float, default=1e-3)
    parser.add_argument("--align_w", type=float, default=0.1)
    parser.add_argument("--n_iters", type=int, default=4)
    parser.add_argument("--i_print", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    return parser


if __name__ == "__main__":
    train(config_parser().parse_args([]))
