# expect: clean
# source: https://github.com/arthurliu1998/GAN-inversion/issues/3
"""GAN inversion with latent and per-layer noise optimisation, in the style of
the rosinality StyleGAN2 ``projector.py``: a small style-based generator
(mapping network, modulated convs with noise injection, ``make_noise`` and
``mean_latent``), a frozen feature network standing in for LPIPS, the projector
helpers (``get_lr`` ramp schedule, ``latent_noise``, ``noise_regularize``,
``noise_normalize_``) and a result writer that collects the inverted latent
``w`` and the optimised noise maps for every target image.
"""
import argparse
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim


class PixelNorm(nn.Module):
    def forward(self, x):
        return x * torch.rsqrt(torch.mean(x ** 2, dim=1, keepdim=True) + 1e-8)


class EqualLinear(nn.Module):
    def __init__(self, in_dim, out_dim, lr_mul=1.0, activation=False):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_dim, in_dim) / lr_mul)
        self.bias = nn.Parameter(torch.zeros(out_dim))
        self.scale = (1 / math.sqrt(in_dim)) * lr_mul
        self.lr_mul = lr_mul
        self.activation = activation

    def forward(self, x):
        out = F.linear(x, self.weight * self.scale, self.bias * self.lr_mul)
        return F.leaky_relu(out, 0.2) * math.sqrt(2) if self.activation else out


class NoiseInjection(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1))

    def forward(self, image, noise=None):
        if noise is None:
            b, _, h, w = image.shape
            noise = image.new_empty(b, 1, h, w).normal_()
        return image + self.weight * noise


class ModulatedConv2d(nn.Module):
    def __init__(self, in_ch, out_ch, kernel, style_dim, demodulate=True):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(1, out_ch, in_ch, kernel, kernel))
        self.scale = 1 / math.sqrt(in_ch * kernel ** 2)
        self.modulation = EqualLinear(style_dim, in_ch)
        with torch.no_grad():
            self.modulation.bias.fill_(1.0)
        self.demodulate = demodulate
        self.padding = kernel // 2
        self.out_ch = out_ch

    def forward(self, x, style):
        b, in_ch, h, w = x.shape
        s = self.modulation(style).view(b, 1, in_ch, 1, 1)
        weight = self.scale * self.weight * s
        if self.demodulate:
            demod = torch.rsqrt(weight.pow(2).sum([2, 3, 4]) + 1e-8)
            weight = weight * demod.view(b, self.out_ch, 1, 1, 1)
        weight = weight.view(b * self.out_ch, in_ch, *weight.shape[3:])
        out = F.conv2d(x.view(1, b * in_ch, h, w), weight, padding=self.padding, groups=b)
        return out.view(b, self.out_ch, h, w)


class StyledConv(nn.Module):
    def __init__(self, in_ch, out_ch, style_dim, upsample=False):
        super().__init__()
        self.upsample = upsample
        self.conv = ModulatedConv2d(in_ch, out_ch, 3, style_dim)
        self.noise = NoiseInjection()
        self.bias = nn.Parameter(torch.zeros(1, out_ch, 1, 1))

    def forward(self, x, style, noise=None):
        if self.upsample:
            x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
        out = self.noise(self.conv(x, style), noise=noise)
        return F.leaky_relu(out + self.bias, 0.2) * math.sqrt(2)


class Generator(nn.Module):
    def __init__(self, size=16, style_dim=32, n_mlp=4, channels=16):
        super().__init__()
        self.size, self.style_dim = size, style_dim
        layers = [PixelNorm()] + [EqualLinear(style_dim, style_dim, lr_mul=0.01,
                                              activation=True) for _ in range(n_mlp)]
        self.style = nn.Sequential(*layers)
        self.input = nn.Parameter(torch.randn(1, channels, 4, 4))
        self.log_size = int(math.log(size, 2))
        self.convs = nn.ModuleList()
        for i in range(3, self.log_size + 1):
            self.convs.append(StyledConv(channels, channels, style_dim, upsample=True))
            self.convs.append(StyledConv(channels, channels, style_dim))
        self.conv1 = StyledConv(channels, channels, style_dim)
        self.to_rgb = ModulatedConv2d(channels, 3, 1, style_dim, demodulate=False)
        self.n_latent = len(self.convs) + 2

    def make_noise(self):
        device = self.input.device
        noises = [torch.randn(1, 1, 4, 4, device=device)]
        for i in range(3, self.log_size + 1):
            for _ in range(2):
                noises.append(torch.randn(1, 1, 2 ** i, 2 ** i, device=device))
        return noises

    def mean_latent(self, n_latent):
        latent_in = torch.randn(n_latent, self.style_dim, device=self.input.device)
        return self.style(latent_in).mean(0, keepdim=True)

    def forward(self, styles, input_is_latent=False, noise=None):
        latent = styles[0] if input_is_latent else self.style(styles[0])
        if latent.ndim == 2:
            latent = latent.unsqueeze(1).repeat(1, self.n_latent, 1)
        if noise is None:
            noise = [None] * (len(self.convs) + 1)
        out = self.input.repeat(latent.shape[0], 1, 1, 1)
        out = self.conv1(out, latent[:, 0], noise=noise[0])
        for i, conv in enumerate(self.convs):
            out = conv(out, latent[:, i + 1], noise=noise[i + 1])
        return self.to_rgb(out, latent[:, -1]), None


class FeatureDistance(nn.Module):
    """Frozen multi-scale conv features; stands in for the LPIPS network."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Conv2d(3, 8, 3, padding=1),
                                     nn.Conv2d(8, 16, 3, stride=2, padding=1)])
        for p in self.parameters():
            p.requires_grad_(False)

    def forward(self, a, b):
        dist = 0.0
        for block in self.blocks:
            a, b = F.relu(block(a)), F.relu(block(b))
            dist = dist + (F.normalize(a, dim=1) - F.normalize(b, dim=1)).pow(2).mean((1, 2, 3))
        return dist


def noise_regularize(noises):
    loss = 0
    for noise in noises:
        size = noise.shape[2]
        while True:
            loss = (loss + (noise * torch.roll(noise, shifts=1, dims=3)).mean().pow(2)
                    + (noise * torch.roll(noise, shifts=1, dims=2)).mean().pow(2))
            if size <= 8:
                break
            noise = noise.reshape([-1, 1, size // 2, 2, size // 2, 2]).mean([3, 5])
            size //= 2
    return loss


def noise_normalize_(noises):
    for noise in noises:
        mean, std = noise.mean(), noise.std()
        noise.data.add_(-mean).div_(std)


def get_lr(t, initial_lr, rampdown=0.25, rampup=0.05):
    lr_ramp = min(1, (1 - t) / rampdown)
    lr_ramp = 0.5 - 0.5 * math.cos(lr_ramp * math.pi)
    lr_ramp = lr_ramp * min(1, t / rampup)
    return initial_lr * lr_ramp


def latent_noise(latent, strength):
    return latent + torch.randn_like(latent) * strength


def save_inversion(results, name, latent, noises):
    results[name] = {
        "latent_w": latent.detach().cpu().numpy(),
        "noise": [noise.detach().cpu().numpy() for noise in noises],
    }


def project(args, g_ema, percept, imgs, names):
    with torch.no_grad():
        latent_mean = g_ema.mean_latent(args.n_mean_latent)
        latent_std = ((g_ema.style(torch.randn(args.n_mean_latent, g_ema.style_dim))
                       - latent_mean).pow(2).sum() / args.n_mean_latent) ** 0.5
    noises_single = g_ema.make_noise()
    noises = [noise.repeat(imgs.shape[0], 1, 1, 1).normal_() for noise in noises_single]
    latent_in = latent_mean.detach().clone().repeat(imgs.shape[0], 1)
    if args.w_plus:
        latent_in = latent_in.unsqueeze(1).repeat(1, g_ema.n_latent, 1)
    latent_in.requires_grad = True
    for noise in noises:
        noise.requires_grad = True
    optimizer = optim.Adam([latent_in] + noises, lr=args.lr)
    for i in range(args.step):
        t = i / args.step
        lr = get_lr(t, args.lr)
        optimizer.param_groups[0]["lr"] = lr
        noise_strength = latent_std * args.noise * max(0, 1 - t / args.noise_ramp) ** 2
        latent_n = latent_noise(latent_in, noise_strength.item())
        img_gen, _ = g_ema([latent_n], input_is_latent=True, noise=noises)
        p_loss = percept(img_gen, imgs).sum()
        n_loss = noise_regularize(noises)
        mse_loss = F.mse_loss(img_gen, imgs)
        loss = p_loss + args.noise_regularize * n_loss + args.mse * mse_loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        noise_normalize_(noises)
        if i % 10 == 0:
            print("step %d perceptual %.4f noise %.4f mse %.4f lr %.4f" % (
                i, p_loss.item(), n_loss.item(), mse_loss.item(), lr))
    results = {}
    for i, name in enumerate(names):
        save_inversion(results, name, latent_in[i], [n[i:i + 1] for n in noises])
    return results


def main():
    parser = argparse.ArgumentParser(description="Image projector to the generator latent spaces")
    parser.add_argument("--size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--noise", type=float, default=0.05)
    parser.add_argument("--noise_ramp", type=float, default=0.75)
    parser.add_argument("--step", type=int, default=30)
    parser.add_argument("--noise_regularize", type=float, default=1e5)
    parser.add_argument("--mse", type=float, default=0)
    parser.add_argument("--n_mean_latent", type=int, default=512)
    parser.add_argument("--w_plus", action="store_true")
    args = parser.parse_args(["--w_plus"])
    torch.manual_seed(0)
    g_ema = Generator(size=args.size)
    g_ema.eval()
    percept = FeatureDistance()
    imgs = torch.tanh(torch.randn(2, 3, args.size, args.size))
    results = project(args, g_ema, percept, imgs, ["face_000", "face_001"])
    for name, res in results.items():
        print(name, res["latent_w"].shape, len(res["noise"]))


if __name__ == "__main__":
    main()
