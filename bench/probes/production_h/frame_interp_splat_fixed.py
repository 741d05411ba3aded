# expect: clean
# source: https://github.com/sniklaus/softmax-splatting/issues/50
"""Video frame interpolation with softmax splatting of a feature pyramid.

A tiny flow estimator predicts flow 0->1; features of frame 0 are forward-
warped to time t with softmax splatting at every pyramid level and a small
synthesis head decodes the middle frame."""
import math
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)


@dataclass
class InterpConfig:
    size: int = 32
    batch: int = 4
    levels: int = 3
    steps: int = 12
    lr: float = 2e-3
    mode: str = "soft"
    t: float = 0.5
    ema_decay: float = 0.98
    log_every: int = 4


def _splat_reference(tenIn, tenFlow):
    B, C, H, W = tenIn.shape
    gx = torch.arange(W, dtype=tenIn.dtype).view(1, 1, W).expand(B, H, W) + tenFlow[:, 0]
    gy = torch.arange(H, dtype=tenIn.dtype).view(1, H, 1).expand(B, H, W) + tenFlow[:, 1]
    x0, y0 = gx.detach().floor(), gy.detach().floor()
    bidx = torch.arange(B).view(B, 1, 1).expand(B, H, W)
    src = tenIn.permute(0, 2, 3, 1)
    out = tenIn.new_zeros(B * H * W, C)
    for dx, dy in ((0, 0), (1, 0), (0, 1), (1, 1)):
        xs, ys = x0 + dx, y0 + dy
        wx = (1 - (gx - xs).abs()).clamp(min=0)
        wy = (1 - (gy - ys).abs()).clamp(min=0)
        valid = (xs >= 0) & (xs < W) & (ys >= 0) & (ys < H)
        idx = (bidx * H * W + ys.clamp(0, H - 1).long() * W + xs.clamp(0, W - 1).long())[valid]
        vals = (src * (wx * wy).unsqueeze(-1))[valid]
        out = out.index_add(0, idx, vals)
    return out.view(B, H, W, C).permute(0, 3, 1, 2).contiguous()


class softsplat_func(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tenIn, tenFlow):
        tenIn = tenIn.float()
        tenFlow = tenFlow.float()
        tenOut = _splat_reference(tenIn, tenFlow)
        ctx.save_for_backward(tenIn.clone(), tenFlow.clone())
        return tenOut

    @staticmethod
    def backward(ctx, tenOutgrad):
        tenIn, tenFlow = ctx.saved_tensors
        with torch.enable_grad():
            tin = tenIn.detach().requires_grad_(ctx.needs_input_grad[0])
            tfl = tenFlow.detach().requires_grad_(ctx.needs_input_grad[1])
            out = _splat_reference(tin, tfl)
            wrt = [t for t in (tin, tfl) if t.requires_grad]
            grads = torch.autograd.grad(out, wrt, tenOutgrad, allow_unused=True)
        grads = list(grads)
        tenIngrad = grads.pop(0) if tin.requires_grad else None
        tenFlowgrad = grads.pop(0) if tfl.requires_grad else None
        return tenIngrad, tenFlowgrad


def softsplat(tenIn, tenFlow, tenMetric, strMode):
    assert strMode.split("-")[0] in ["sum", "avg", "linear", "soft"]
    if strMode == "avg":
        tenIn = torch.cat([tenIn, tenIn.new_ones([tenIn.shape[0], 1, tenIn.shape[2], tenIn.shape[3]])], 1)
    elif strMode.split("-")[0] == "linear":
        tenIn = torch.cat([tenIn * tenMetric, tenMetric], 1)
    elif strMode.split("-")[0] == "soft":
        tenIn = torch.cat([tenIn * tenMetric.exp(), tenMetric.exp()], 1)
    tenOut = softsplat_func.apply(tenIn, tenFlow)
    if strMode.split("-")[0] in ["avg", "linear", "soft"]:
        tenNormalize = tenOut[:, -1:, :, :] + 0.0000001
        tenOut = tenOut[:, :-1, :, :] / tenNormalize
    return tenOut


def backwarp(tenIn, tenFlow):
    B, _, H, W = tenIn.shape
    gx = torch.linspace(-1.0, 1.0, W).view(1, 1, 1, W).expand(B, -1, H, -1)
    gy = torch.linspace(-1.0, 1.0, H).view(1, 1, H, 1).expand(B, -1, -1, W)
    grid = torch.cat([gx, gy], 1)
    norm = torch.cat([tenFlow[:, 0:1] / ((W - 1.0) / 2.0), tenFlow[:, 1:2] / ((H - 1.0) / 2.0)], 1)
    return F.grid_sample(tenIn, (grid + norm).permute(0, 2, 3, 1), mode="bilinear",
                         padding_mode="border", align_corners=True)


def downsample_flow(flow):
    half = flow[:, :, ::2, ::2]
    half.mul_(0.5)
    return half


class FlowNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(6, 32, 3, padding=1), nn.LeakyReLU(0.1),
                                 nn.Conv2d(32, 32, 3, padding=1), nn.LeakyReLU(0.1),
                                 nn.Conv2d(32, 2, 3, padding=1))

    def forward(self, one, two):
        return 4.0 * torch.tanh(self.net(torch.cat([one, two], 1)))


class Encode(nn.Module):
    def __init__(self, levels):
        super().__init__()
        chans = [3, 16, 24, 32][: levels + 1]
        self.blocks = nn.ModuleList()
        for i in range(levels):
            stride = 1 if i == 0 else 2
            self.blocks.append(nn.Sequential(nn.Conv2d(chans[i], chans[i + 1], 3, stride, 1),
                                             nn.PReLU(chans[i + 1], 0.25),
                                             nn.Conv2d(chans[i + 1], chans[i + 1], 3, 1, 1),
                                             nn.PReLU(chans[i + 1], 0.25)))
        self.chans = chans[1:]

    def forward(self, x):
        feats = []
        for b in self.blocks:
            x = b(x)
            feats.append(x)
        return feats


class Softmetric(nn.Module):
    def __init__(self):
        super().__init__()
        self.alpha = nn.Parameter(torch.tensor(-1.0))

    def forward(self, one, two, flow):
        return self.alpha * (one - backwarp(two, flow)).abs().mean(1, keepdim=True)


class Synthesis(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.encode = Encode(cfg.levels)
        self.metric = Softmetric()
        self.decode = nn.ModuleList([nn.Conv2d(c + (0 if i == len(self.encode.chans) - 1 else 16), 16, 3, padding=1)
                                     for i, c in enumerate(self.encode.chans)])
        self.head = nn.Conv2d(16, 3, 3, padding=1)

    def forward(self, one, two, flow01):
        feats = self.encode(one)
        metric = self.metric(one, two, flow01)
        flow = flow01 * self.cfg.t
        warped = []
        for level, feat in enumerate(feats):
            if level > 0:
                flow = downsample_flow(flow)
                metric = F.avg_pool2d(metric, 2)
            warped.append(softsplat(feat, flow, metric, self.cfg.mode))
        x = None
        for level in reversed(range(len(warped))):
            inp = warped[level] if x is None else torch.cat([warped[level], F.interpolate(x, scale_factor=2.0)], 1)
            x = F.leaky_relu(self.decode[level](inp), 0.1)
        return torch.sigmoid(self.head(x))


def make_batch(cfg, gen):
    B, S = cfg.batch, cfg.size
    yy, xx = torch.meshgrid(torch.arange(S, dtype=torch.float32), torch.arange(S, dtype=torch.float32), indexing="ij")
    frames = []
    c = torch.rand(B, 2, generator=gen) * (S / 2) + S / 4
    v = (torch.rand(B, 2, generator=gen) - 0.5) * 6
    color = torch.rand(B, 3, generator=gen)
    for tt in (0.0, cfg.t, 1.0):
        cx = (c[:, 0] + tt * v[:, 0]).view(B, 1, 1)
        cy = (c[:, 1] + tt * v[:, 1]).view(B, 1, 1)
        blob = torch.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / 18.0)
        frames.append(0.1 + blob.unsqueeze(1) * color.view(B, 3, 1, 1))
    return frames


def psnr(a, b):
    return 10 * math.log10(1.0 / max(F.mse_loss(a, b).item(), 1e-10))


def main():
    cfg = InterpConfig()
    gen = torch.Generator().manual_seed(3)
    flownet, synth = FlowNet(), Synthesis(cfg)
    params = list(flownet.parameters()) + list(synth.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg.steps)
    ema = [p.detach().clone() for p in params]
    t0 = time.time()
    for step in range(cfg.steps):
        one, mid, two = make_batch(cfg, gen)
        flow01 = flownet(one, two)
        pred = synth(one, two, flow01)
        loss = F.l1_loss(pred, mid) + 0.01 * flow01.diff(dim=-1).abs().mean()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        with torch.no_grad():
            for e, p in zip(ema, params):
                e.mul_(cfg.ema_decay).add_(p, alpha=1 - cfg.ema_decay)
        if step % cfg.log_every == 0:
            print(f"step {step} loss {loss.item():.4f} psnr {psnr(pred.detach(), mid):.2f} "
                  f"lr {sched.get_last_lr()[0]:.2e} ({time.time() - t0:.1f}s)")


if __name__ == "__main__":
    main()
