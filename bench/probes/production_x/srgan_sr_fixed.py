# expect: clean
# source: https://github.com/leftthomas/SRGAN/issues/79
"""SRGAN-style single-image super-resolution trainer.

A residual generator with PixelShuffle upsampling is trained against a patch
discriminator with a perceptual + adversarial + image + total-variation
generator loss, then validated with PSNR / SSIM on held-out low-resolution
crops.  Data are synthetic (seeded random textures, bicubic-downsampled).
"""
import argparse
import math
from math import log10

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Train Super Resolution Models')
    parser.add_argument('--crop_size', default=24, type=int, help='training images crop size')
    parser.add_argument('--upscale_factor', default=2, type=int, choices=[2, 4, 8])
    parser.add_argument('--num_epochs', default=2, type=int)
    parser.add_argument('--batch_size', default=4, type=int)
    parser.add_argument('--steps_per_epoch', default=3, type=int)
    parser.add_argument('--seed', default=0, type=int)
    return parser.parse_args(argv)


# --------------------------------------------------------------------------- data
class SyntheticDIV2K:
    """Seeded stand-in for the DIV2K crop loader (HR crops + bicubic LR)."""

    def __init__(self, crop_size, upscale_factor, n_items, seed):
        g = torch.Generator().manual_seed(seed)
        self.hr = torch.rand(n_items, 3, crop_size, crop_size, generator=g)
        self.lr = F.interpolate(self.hr, scale_factor=1.0 / upscale_factor, mode='bicubic',
                                align_corners=False).clamp(0, 1)

    def batches(self, batch_size):
        for i in range(0, self.hr.size(0), batch_size):
            yield self.lr[i:i + batch_size], self.hr[i:i + batch_size]


# -------------------------------------------------------------------------- model
class ResidualBlock(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, kernel_size=3, padding=1)
        self.bn1 = nn.BatchNorm2d(channels)
        self.prelu = nn.PReLU()
        self.conv2 = nn.Conv2d(channels, channels, kernel_size=3, padding=1)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        residual = self.prelu(self.bn1(self.conv1(x)))
        residual = self.bn2(self.conv2(residual))
        return x + residual


class UpsampleBLock(nn.Module):
    def __init__(self, in_channels, up_scale):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, in_channels * up_scale ** 2, kernel_size=3, padding=1)
        self.pixel_shuffle = nn.PixelShuffle(up_scale)
        self.prelu = nn.PReLU()

    def forward(self, x):
        return self.prelu(self.pixel_shuffle(self.conv(x)))


class Generator(nn.Module):
    def __init__(self, scale_factor, width=16, n_res=2):
        super().__init__()
        upsample_block_num = int(math.log(scale_factor, 2))
        self.block1 = nn.Sequential(nn.Conv2d(3, width, kernel_size=9, padding=4), nn.PReLU())
        self.res = nn.Sequential(*[ResidualBlock(width) for _ in range(n_res)])
        self.block7 = nn.Sequential(nn.Conv2d(width, width, kernel_size=3, padding=1), nn.BatchNorm2d(width))
        self.up = nn.Sequential(*[UpsampleBLock(width, 2) for _ in range(upsample_block_num)])
        self.tail = nn.Conv2d(width, 3, kernel_size=9, padding=4)

    def forward(self, x):
        block1 = self.block1(x)
        block7 = self.block7(self.res(block1))
        out = self.tail(self.up(block1 + block7))
        return (torch.tanh(out) + 1) / 2


class Discriminator(nn.Module):
    def __init__(self, width=16):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, width, kernel_size=3, padding=1), nn.LeakyReLU(0.2),
            nn.Conv2d(width, width, kernel_size=3, stride=2, padding=1), nn.BatchNorm2d(width), nn.LeakyReLU(0.2),
            nn.Conv2d(width, 2 * width, kernel_size=3, padding=1), nn.BatchNorm2d(2 * width), nn.LeakyReLU(0.2),
            nn.AdaptiveAvgPool2d(1),
            nn.Conv2d(2 * width, 4 * width, kernel_size=1), nn.LeakyReLU(0.2),
            nn.Conv2d(4 * width, 1, kernel_size=1),
        )

    def forward(self, x):
        batch_size = x.size(0)
        return torch.sigmoid(self.net(x).view(batch_size))


# --------------------------------------------------------------------------- loss
class TVLoss(nn.Module):
    def __init__(self, tv_loss_weight=1):
        super().__init__()
        self.tv_loss_weight = tv_loss_weight

    def forward(self, x):
        batch_size, _, h_x, w_x = x.size()
        count_h = x[:, :, 1:, :].numel() / batch_size
        count_w = x[:, :, :, 1:].numel() / batch_size
        h_tv = torch.pow(x[:, :, 1:, :] - x[:, :, :h_x - 1, :], 2).sum()
        w_tv = torch.pow(x[:, :, :, 1:] - x[:, :, :, :w_x - 1], 2).sum()
        return self.tv_loss_weight * 2 * (h_tv / count_h + w_tv / count_w) / batch_size


class GeneratorLoss(nn.Module):
    """Adversarial + perception + image + TV loss (frozen random feature net as 'VGG')."""

    def __init__(self):
        super().__init__()
        loss_network = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1))
        for param in loss_network.parameters():
            param.requires_grad = False
        self.loss_network = loss_network
        self.mse_loss = nn.MSELoss()
        self.tv_loss = TVLoss()

    def forward(self, out_labels, out_images, target_images):
        adversarial_loss = torch.mean(1 - out_labels)
        perception_loss = self.mse_loss(self.loss_network(out_images), self.loss_network(target_images))
        image_loss = self.mse_loss(out_images, target_images)
        tv_loss = self.tv_loss(out_images)
        return image_loss + 0.001 * adversarial_loss + 0.006 * perception_loss + 2e-8 * tv_loss


def ssim(img1, img2, window_size=5):
    pad = window_size // 2
    mu1 = F.avg_pool2d(img1, window_size, 1, pad)
    mu2 = F.avg_pool2d(img2, window_size, 1, pad)
    sigma1 = F.avg_pool2d(img1 * img1, window_size, 1, pad) - mu1 ** 2
    sigma2 = F.avg_pool2d(img2 * img2, window_size, 1, pad) - mu2 ** 2
    sigma12 = F.avg_pool2d(img1 * img2, window_size, 1, pad) - mu1 * mu2
    c1, c2 = 0.01 ** 2, 0.03 ** 2
    ssim_map = ((2 * mu1 * mu2 + c1) * (2 * sigma12 + c2)) / ((mu1 ** 2 + mu2 ** 2 + c1) * (sigma1 + sigma2 + c2))
    return ssim_map.mean()


# ------------------------------------------------------------------------ trainer
class SRGANTrainer:
    def __init__(self, opt):
        self.opt = opt
        self.netG = Generator(opt.upscale_factor)
        self.netD = Discriminator()
        self.generator_criterion = GeneratorLoss()
        self.optimizerG = optim.Adam(self.netG.parameters())
        self.optimizerD = optim.Adam(self.netD.parameters())
        self.results = {'d_loss': [], 'g_loss': [], 'd_score': [], 'g_score': [], 'psnr': [], 'ssim': []}

    def train_step(self, data, target):
        real_img = target
        z = data
        fake_img = self.netG(z)

        ############################
        # (1) Update D network: maximize D(x)-1-D(G(z))
        ###########################
        self.netD.zero_grad()
        real_out = self.netD(real_img).mean()
        fake_out = self.netD(fake_img).mean()
        d_loss = 1 - real_out + fake_out
        d_loss.backward(retain_graph=True)
        self.optimizerD.step()

        ############################
        # (2) Update G network: minimize 1-D(G(z)) + Perception Loss + Image Loss + TV Loss
        ###########################
        self.netG.zero_grad()
        fake_img = self.netG(z)
        fake_out = self.netD(fake_img).mean()
        g_loss = self.generator_criterion(fake_out, fake_img, real_img)
        g_loss.backward()
        self.optimizerG.step()
        return d_loss.item(), g_loss.item(), real_out.item(), fake_out.item()

    @torch.no_grad()
    def evaluate(self, val_set):
        self.netG.eval()
        mse_sum, ssim_sum, n = 0.0, 0.0, 0
        for lr, hr in val_set.batches(1):
            sr = self.netG(lr)
            mse_sum += ((sr - hr) ** 2).mean().item()
            ssim_sum += ssim(sr, hr).item()
            n += 1
        self.netG.train()
        psnr = 10 * log10(1.0 / max(mse_sum / n, 1e-10))
        return psnr, ssim_sum / n

    def fit(self, train_set, val_set):
        for epoch in range(1, self.opt.num_epochs + 1):
            running = {'batch_sizes': 0, 'd_loss': 0, 'g_loss': 0}
            self.netG.train()
            self.netD.train()
            for data, target in train_set.batches(self.opt.batch_size):
                d_loss, g_loss, d_score, g_score = self.train_step(data, target)
                running['batch_sizes'] += data.size(0)
                running['d_loss'] += d_loss * data.size(0)
                running['g_loss'] += g_loss * data.size(0)
            psnr, ssim_val = self.evaluate(val_set)
            self.results['d_loss'].append(running['d_loss'] / running['batch_sizes'])
            self.results['g_loss'].append(running['g_loss'] / running['batch_sizes'])
            self.results['psnr'].append(psnr)
            self.results['ssim'].append(ssim_val)
            print('[%d/%d] Loss_D: %.4f Loss_G: %.4f PSNR: %.2f dB SSIM: %.4f' % (
                epoch, self.opt.num_epochs, self.results['d_loss'][-1], self.results['g_loss'][-1], psnr, ssim_val))


def main():
    opt = parse_args([])
    torch.manual_seed(opt.seed)
    np.random.seed(opt.seed)
    train_set = SyntheticDIV2K(opt.crop_size, opt.upscale_factor, opt.batch_size * opt.steps_per_epoch, opt.seed)
    val_set = SyntheticDIV2K(opt.crop_size, opt.upscale_factor, 2, opt.seed + 1)
    trainer = SRGANTrainer(opt)
    print('# generator parameters:', sum(p.numel() for p in trainer.netG.parameters()))
    print('# discriminator parameters:', sum(p.numel() for p in trainer.netD.parameters()))
    trainer.fit(train_set, val_set)


if __name__ == '__main__':
    main()
