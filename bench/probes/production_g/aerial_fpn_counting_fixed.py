# expect: clean
# source: https://github.com/lyongo/NWPU-MOC/issues/4
"""Multi-category object counting in aerial images with an FPN density head.

A small CNN backbone feeds a feature pyramid network; the finest pyramid
level is decoded into one density map per category (cars, ships, storage
tanks).  Ground-truth density maps are Gaussian-smoothed point annotations of
a synthetic aerial scene generator.
"""
import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class CountingConfig:
    image_size: int = 64
    categories: tuple = ("car", "ship", "tank")
    backbone_channels: list = field(default_factory=lambda: [16, 32, 64])
    fpn_channels: int = 32
    density_sigma: float = 1.5
    density_scale: float = 100.0
    batch_size: int = 4
    steps: int = 8
    lr: float = 1e-3
    weight_decay: float = 1e-4
    seed: int = 21


class Conv2d(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, NL="relu",
                 same_padding=False, bn=True, bias=True):
        super().__init__()
        padding = int((kernel_size - 1) // 2) if same_padding else 0
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding=padding, bias=bias)
        self.bn = nn.BatchNorm2d(out_channels) if bn else None
        if NL == "relu":
            self.relu = nn.ReLU(inplace=False)
        elif NL == "prelu":
            self.relu = nn.PReLU()
        else:
            self.relu = None

    def forward(self, x):
        x = self.conv(x)
        if self.bn is not None:
            x = self.bn(x)
        if self.relu is not None:
            x = self.relu(x)
        return x


class Backbone(nn.Module):
    def __init__(self, chans):
        super().__init__()
        self.stem = Conv2d(3, chans[0], 3, stride=2, same_padding=True)
        self.stages = nn.ModuleList()
        for cin, cout in zip(chans[:-1], chans[1:]):
            self.stages.append(nn.Sequential(Conv2d(cin, cout, 3, stride=2, same_padding=True),
                                             Conv2d(cout, cout, 3, same_padding=True)))

    def forward(self, x):
        feats = [self.stem(x)]
        for stage in self.stages:
            feats.append(stage(feats[-1]))
        return feats


class FPN(nn.Module):
    def __init__(self, in_channels, out_channels, bn=True):
        super().__init__()
        self.in_channels = in_channels
        self.lateral_convs = nn.ModuleList()
        self.fpn_convs = nn.ModuleList()
        for c in in_channels:
            self.lateral_convs.append(Conv2d(c, out_channels, 1, bn=bn, bias=not bn, same_padding=True))
            self.fpn_convs.append(Conv2d(out_channels, out_channels, 3, bn=bn, bias=not bn, same_padding=True))
        self.init_weights()

    def init_weights(self):
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.xavier_uniform_(m.weight)

    def forward(self, inputs):
        assert len(inputs) == len(self.in_channels)
        laterals = [lateral_conv(inputs[i]) for i, lateral_conv in enumerate(self.lateral_convs)]
        used_backbone_levels = len(laterals)
        for i in range(used_backbone_levels - 1, 0, -1):
            prev_shape = laterals[i - 1].shape[2:]
            laterals[i - 1] = laterals[i - 1] + F.interpolate(laterals[i], size=prev_shape, mode="nearest")
        return tuple(self.fpn_convs[i](laterals[i]) for i in range(used_backbone_levels))


class DensityCounter(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.backbone = Backbone(cfg.backbone_channels)
        self.neck = FPN(cfg.backbone_channels, cfg.fpn_channels)
        self.head = nn.Sequential(Conv2d(cfg.fpn_channels, 32, 3, same_padding=True),
                                  nn.Conv2d(32, len(cfg.categories), 1))

    def forward(self, x):
        p2 = self.neck(self.backbone(x))[0]
        return F.relu(self.head(p2))


def gaussian_kernel(sigma, radius=None):
    radius = radius or int(3 * sigma)
    ax = torch.arange(-radius, radius + 1, dtype=torch.float32)
    k = torch.exp(-(ax[:, None] ** 2 + ax[None, :] ** 2) / (2 * sigma ** 2))
    return k / k.sum()


class AerialSceneGenerator:
    COLORS = torch.tensor([[0.9, 0.2, 0.2], [0.2, 0.3, 0.9], [0.8, 0.8, 0.8]])

    def __init__(self, cfg, rng):
        self.cfg, self.rng = cfg, rng
        self.kernel = gaussian_kernel(cfg.density_sigma)[None, None]

    def sample(self):
        cfg, s = self.cfg, self.cfg.image_size
        img = 0.3 + 0.1 * torch.from_numpy(self.rng.standard_normal((3, s, s))).float()
        dots = torch.zeros(len(cfg.categories), s // 2, s // 2)
        for c in range(len(cfg.categories)):
            for _ in range(self.rng.integers(2, 9)):
                y, x = self.rng.integers(2, s - 3, size=2)
                img[:, y - 1:y + 2, x - 1:x + 2] = self.COLORS[c][:, None, None]
                dots[c, y // 2, x // 2] += 1.0
        pad = self.kernel.shape[-1] // 2
        density = F.conv2d(dots[:, None], self.kernel, padding=pad)[:, 0]
        return img, density

    def batch(self, n):
        imgs, dens = zip(*(self.sample() for _ in range(n)))
        return torch.stack(imgs), torch.stack(dens)


def counting_loss(pred, target, scale):
    mse = F.mse_loss(pred, target * scale)
    count_l1 = (pred.sum((2, 3)) / scale - target.sum((2, 3))).abs().mean()
    return mse + 0.1 * count_l1


def evaluate(model, gen, cfg, n=8):
    model.eval()
    with torch.no_grad():
        imgs, dens = gen.batch(n)
        pred = model(imgs) / cfg.density_scale
        mae = (pred.sum((2, 3)) - dens.sum((2, 3))).abs().mean(0)
    model.train()
    return {c: round(v, 2) for c, v in zip(cfg.categories, mae.tolist())}


def main(cfg):
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    gen = AerialSceneGenerator(cfg, rng)
    model = DensityCounter(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * (1 + math.cos(math.pi * s / cfg.steps)))
    for step in range(cfg.steps):
        imgs, dens = gen.batch(cfg.batch_size)
        pred = model(imgs)
        loss = counting_loss(pred, dens, cfg.density_scale)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 4 == 0:
            print(f"step {step} loss {loss.item():.4f}")
    print("per-category MAE:", evaluate(model, gen, cfg))


if __name__ == "__main__":
    main(CountingConfig())
