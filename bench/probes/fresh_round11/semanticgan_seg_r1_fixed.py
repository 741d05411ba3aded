# expect: clean
# source: https://github.com/nv-tlabs/semanticGAN_code/issues/24
"""semanticGAN-style semi-supervised segmentation GAN: a generator produces an
image and a segmentation mask, an image discriminator judges images, and a
joint image+mask discriminator judges pairs.  Both discriminators get lazy R1
regularization on the real inputs; masks are rendered with a color map for
the sample log."""
import argparse
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import autograd

torch.manual_seed(0)
np.random.seed(0)


def get_args(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument('--iter', type=int, default=6)
    parser.add_argument('--batch', type=int, default=4)
    parser.add_argument('--size', type=int, default=16)
    parser.add_argument('--latent', type=int, default=32)
    parser.add_argument('--seg_dim', type=int, default=3)
    parser.add_argument('--r1', type=float, default=10.0)
    parser.add_argument('--d_reg_every', type=int, default=2)
    parser.add_argument('--lr', type=float, default=0.002)
    return parser.parse_args(argv)


color_map = {0: [0, 0, 0], 1: [204, 0, 0], 2: [76, 153, 0], 3: [204, 204, 0]}


def mask2rgb(mask):
    idx = mask.argmax(0).numpy() if mask.shape[0] > 1 else (mask[0].numpy() > 0.5).astype(int)
    rgb = np.zeros(idx.shape + (3,), dtype=np.uint8)
    for k, c in color_map.items():
        rgb[idx == k] = c
    return rgb


class Generator(nn.Module):
    def __init__(self, latent, size, seg_dim):
        super().__init__()
        self.size = size
        self.fc = nn.Linear(latent, 32 * (size // 4) ** 2)
        self.up = nn.Sequential(
            nn.Upsample(scale_factor=2), nn.Conv2d(32, 32, 3, padding=1), nn.LeakyReLU(0.2),
            nn.Upsample(scale_factor=2), nn.Conv2d(32, 16, 3, padding=1), nn.LeakyReLU(0.2))
        self.to_rgb = nn.Conv2d(16, 3, 1)
        self.to_seg = nn.Conv2d(16, seg_dim, 1)

    def forward(self, z):
        h = self.fc(z).view(z.shape[0], 32, self.size // 4, self.size // 4)
        h = self.up(h)
        img = torch.tanh(self.to_rgb(h))
        seg = self.to_seg(h)
        seg = torch.softmax(seg, dim=1) if seg.shape[1] > 1 else torch.sigmoid(seg)
        return img, seg


class Discriminator(nn.Module):
    def __init__(self, in_ch):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(in_ch, 16, 3, 2, 1), nn.LeakyReLU(0.2),
            nn.Conv2d(16, 32, 3, 2, 1), nn.LeakyReLU(0.2),
            nn.Flatten(), nn.LazyLinear(1))

    def forward(self, x):
        return self.net(x)


class SegDiscriminator(nn.Module):
    """Judges (image, mask) pairs; masks are fed as per-class probability maps."""

    def __init__(self, seg_dim):
        super().__init__()
        self.seg_dim = seg_dim
        self.d = Discriminator(3 + seg_dim)

    def prepare_mask(self, seg):
        return seg

    def forward(self, img, seg):
        return self.d(torch.cat([img, self.prepare_mask(seg)], dim=1))


def d_logistic_loss(real_pred, fake_pred):
    return F.softplus(-real_pred).mean() + F.softplus(fake_pred).mean()


def g_nonsaturating_loss(fake_pred):
    return F.softplus(-fake_pred).mean()


def d_r1_loss(real_pred, real_inputs):
    grads = autograd.grad(outputs=real_pred.sum(), inputs=real_inputs, create_graph=True)
    return sum(g.pow(2).reshape(g.shape[0], -1).sum(1).mean() for g in grads)


def sample_data(args, step):
    g = torch.Generator().manual_seed(step)
    img = torch.rand(args.batch, 3, args.size, args.size, generator=g) * 2 - 1
    labels = torch.randint(0, args.seg_dim, (args.batch, args.size, args.size), generator=g)
    seg = F.one_hot(labels, args.seg_dim).permute(0, 3, 1, 2).float()
    return img, seg


def train(args, generator, discriminator, discriminator_seg, g_optim, d_optim, d_seg_optim):
    for idx in range(args.iter):
        real_img, real_seg = sample_data(args, idx)
        z = torch.randn(args.batch, args.latent)

        # discriminators
        fake_img, fake_seg = generator(z)
        d_loss = d_logistic_loss(discriminator(real_img), discriminator(fake_img.detach()))
        d_seg_loss = d_logistic_loss(discriminator_seg(real_img, real_seg),
                                     discriminator_seg(fake_img.detach(), fake_seg.detach()))
        d_optim.zero_grad()
        d_seg_optim.zero_grad()
        (d_loss + d_seg_loss).backward()
        d_optim.step()
        d_seg_optim.step()

        if idx % args.d_reg_every == 0:
            real_img.requires_grad = True
            real_seg.requires_grad = True
            real_pred = discriminator(real_img)
            r1_img = d_r1_loss(real_pred, [real_img])
            real_seg_pred = discriminator_seg(real_img, real_seg)
            r1_seg = d_r1_loss(real_seg_pred, [real_img, real_seg])
            d_optim.zero_grad()
            d_seg_optim.zero_grad()
            (args.r1 / 2 * (r1_img + r1_seg) * args.d_reg_every).backward()
            d_optim.step()
            d_seg_optim.step()

        # generator
        fake_img, fake_seg = generator(z)
        g_loss = g_nonsaturating_loss(discriminator(fake_img)) + \
            g_nonsaturating_loss(discriminator_seg(fake_img, fake_seg))
        g_optim.zero_grad()
        g_loss.backward()
        g_optim.step()

        rgb = mask2rgb(fake_seg[0].detach())
        print(f"iter {idx}: d {d_loss.item():.3f} d_seg {d_seg_loss.item():.3f} "
              f"g {g_loss.item():.3f} mask colors {len(np.unique(rgb.reshape(-1, 3), axis=0))}")


def main(argv):
    args = get_args(argv)
    generator = Generator(args.latent, args.size, args.seg_dim)
    discriminator = Discriminator(3)
    discriminator_seg = SegDiscriminator(args.seg_dim)
    with torch.no_grad():
        discriminator(torch.zeros(1, 3, args.size, args.size))
        discriminator_seg(torch.zeros(1, 3, args.size, args.size),
                          torch.zeros(1, args.seg_dim, args.size, args.size))
    d_reg_ratio = args.d_reg_every / (args.d_reg_every + 1)
    g_optim = torch.optim.Adam(generator.parameters(), lr=args.lr, betas=(0.0, 0.99))
    d_optim = torch.optim.Adam(discriminator.parameters(), lr=args.lr * d_reg_ratio,
                               betas=(0.0 ** d_reg_ratio, 0.99 ** d_reg_ratio))
    d_seg_optim = torch.optim.Adam(discriminator_seg.parameters(), lr=args.lr * d_reg_ratio,
                                   betas=(0.0 ** d_reg_ratio, 0.99 ** d_reg_ratio))
    train(args, generator, discriminator, discriminator_seg, g_optim, d_optim, d_seg_optim)
    print("final lr scale", math.sqrt(d_reg_ratio))


if __name__ == '__main__':
    main([])
