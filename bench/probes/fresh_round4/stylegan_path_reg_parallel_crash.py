# expect: grad_unused
# source: https://github.com/rosinality/stylegan2-pytorch/issues/72
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import autograd

torch.manual_seed(4)


@dataclass
class TrainConfig:
    size: int = 8
    latent: int = 16
    n_mlp: int = 3
    channels: int = 16
    batch: int = 8
    iters: int = 6
    lr: float = 2e-3
    g_reg_every: int = 2
    d_reg_every: int = 4
    r1: float = 1.0
    path_regularize: float = 2.0
    path_batch_shrink: int = 2
    device_ids: tuple = (0, 1)


class MappingNetwork(nn.Module):
    def __init__(self, latent, n_mlp):
        super().__init__()
        layers = []
        for _ in range(n_mlp):
            layers += [nn.Linear(latent, latent), nn.LeakyReLU(0.2)]
        self.net = nn.Sequential(*layers)

    def forward(self, z):
        z = z * torch.rsqrt(z.pow(2).mean(dim=1, keepdim=True) + 1e-8)
        return self.net(z)


class ModulatedConv(nn.Module):
    def __init__(self, in_ch, out_ch, latent, demodulate=True):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_ch, in_ch, 3, 3) / math.sqrt(in_ch * 9))
        self.affine = nn.Linear(latent, in_ch)
        self.demodulate = demodulate

    def forward(self, x, w):
        b, c, h, wd = x.shape
        style = self.affine(w).view(b, 1, c, 1, 1) + 1.0
        weight = self.weight.unsqueeze(0) * style
        if self.demodulate:
            weight = weight * torch.rsqrt(weight.pow(2).sum([2, 3, 4], keepdim=True) + 1e-8)
        weight = weight.view(-1, c, 3, 3)
        out = F.conv2d(x.reshape(1, b * c, h, wd), weight, padding=1, groups=b)
        return F.leaky_relu(out.view(b, -1, h, wd), 0.2)


class Generator(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.mapping = MappingNetwork(cfg.latent, cfg.n_mlp)
        self.const = nn.Parameter(torch.randn(1, cfg.channels, cfg.size // 2, cfg.size // 2))
        self.convs = nn.ModuleList([ModulatedConv(cfg.channels, cfg.channels, cfg.latent) for _ in range(3)])
        self.to_rgb = nn.Conv2d(cfg.channels, 3, 1)
        self.n_latent = len(self.convs)

    def forward(self, z, return_latents=False):
        w = self.mapping(z)
        latent = w.unsqueeze(1).repeat(1, self.n_latent, 1)
        x = self.const.repeat(z.shape[0], 1, 1, 1)
        for i, conv in enumerate(self.convs):
            if i == 1:
                x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
            x = conv(x, latent[:, i])
        image = torch.tanh(self.to_rgb(x))
        return (image, latent) if return_latents else (image, None)


class Discriminator(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, cfg.channels, 3, padding=1), nn.LeakyReLU(0.2),
            nn.Conv2d(cfg.channels, cfg.channels, 3, stride=2, padding=1), nn.LeakyReLU(0.2),
            nn.Flatten(), nn.Linear(cfg.channels * (cfg.size // 2) ** 2, 1),
        )

    def forward(self, x):
        return self.net(x)


def gather(outputs):
    if isinstance(outputs[0], torch.Tensor):
        if outputs[0].dim() == 0:
            return torch.stack(outputs)
        return torch.cat(outputs, dim=0)
    if outputs[0] is None:
        return None
    return type(outputs[0])(gather(list(parts)) for parts in zip(*outputs))


class ReplicaParallel(nn.Module):
    def __init__(self, module, device_ids):
        super().__init__()
        self.module = module
        self.device_ids = list(device_ids)

    def forward(self, *inputs, **kwargs):
        if len(self.device_ids) <= 1:
            return self.module(*inputs, **kwargs)
        scattered = list(zip(*[x.chunk(len(self.device_ids), dim=0) for x in inputs]))
        outputs = [self.module(*chunk, **kwargs) for chunk in scattered]
        return gather(outputs)


def d_logistic_loss(real_pred, fake_pred):
    return F.softplus(-real_pred).mean() + F.softplus(fake_pred).mean()


def d_r1_loss(real_pred, real_img):
    grad_real, = autograd.grad(outputs=real_pred.sum(), inputs=real_img, create_graph=True)
    return grad_real.pow(2).reshape(grad_real.shape[0], -1).sum(1).mean()


def g_nonsaturating_loss(fake_pred):
    return F.softplus(-fake_pred).mean()


def g_path_regularize(fake_img, latents, mean_path_length, decay=0.01):
    noise = torch.randn_like(fake_img) / math.sqrt(fake_img.shape[2] * fake_img.shape[3])
    grad, = autograd.grad(outputs=(fake_img * noise).sum(), inputs=latents, create_graph=True)  # raises
    path_lengths = torch.sqrt(grad.pow(2).sum(2).mean(1))
    path_mean = mean_path_length + decay * (path_lengths.mean() - mean_path_length)
    path_penalty = (path_lengths - path_mean).pow(2).mean()
    return path_penalty, path_mean.detach(), path_lengths


def requires_grad(model, flag=True):
    for p in model.parameters():
        p.requires_grad = flag


def sample_real(cfg, n):
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, cfg.size), torch.linspace(-1, 1, cfg.size), indexing="ij")
    phase = torch.rand(n, 1, 1, 1) * math.pi
    return torch.cat([torch.sin(3 * xx + phase), torch.cos(3 * yy + phase), torch.sin(xx * yy + phase)], dim=1)


def train(cfg):
    generator = ReplicaParallel(Generator(cfg), cfg.device_ids)
    discriminator = ReplicaParallel(Discriminator(cfg), cfg.device_ids)
    g_optim = torch.optim.Adam(generator.parameters(), lr=cfg.lr, betas=(0.0, 0.99))
    d_optim = torch.optim.Adam(discriminator.parameters(), lr=cfg.lr, betas=(0.0, 0.99))
    mean_path_length = 0.0
    log = []
    for i in range(cfg.iters):
        real_img = sample_real(cfg, cfg.batch)

        requires_grad(generator, False)
        requires_grad(discriminator, True)
        fake_img, _ = generator(torch.randn(cfg.batch, cfg.latent))
        d_loss = d_logistic_loss(discriminator(real_img), discriminator(fake_img))
        d_optim.zero_grad()
        d_loss.backward()
        d_optim.step()

        if i % cfg.d_reg_every == 0:
            real_img.requires_grad = True
            real_pred = discriminator(real_img)
            r1_loss = d_r1_loss(real_pred, real_img)
            d_optim.zero_grad()
            (cfg.r1 / 2 * r1_loss * cfg.d_reg_every + 0 * real_pred[0]).backward()
            d_optim.step()

        requires_grad(generator, True)
        requires_grad(discriminator, False)
        fake_img, _ = generator(torch.randn(cfg.batch, cfg.latent))
        g_loss = g_nonsaturating_loss(discriminator(fake_img))
        g_optim.zero_grad()
        g_loss.backward()
        g_optim.step()

        if i % cfg.g_reg_every == 0:
            path_batch_size = max(1, cfg.batch // cfg.path_batch_shrink)
            noise = torch.randn(path_batch_size, cfg.latent)
            fake_img, latents = generator(noise, return_latents=True)
            path_loss, mean_path_length, path_lengths = g_path_regularize(fake_img, latents, mean_path_length)
            weighted_path_loss = cfg.path_regularize * cfg.g_reg_every * path_loss
            g_optim.zero_grad()
            weighted_path_loss.backward()
            g_optim.step()
            mean_path_length = float(mean_path_length)

        log.append((d_loss.item(), g_loss.item(), mean_path_length))
        print(f"iter {i}: d {d_loss.item():.4f} g {g_loss.item():.4f} path {mean_path_length:.4f}")
    return log


if __name__ == "__main__":
    train(TrainConfig())
