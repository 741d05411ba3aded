# expect: clean
# source: https://github.com/Lornatang/WassersteinGAN_DIV-PyTorch/issues/1
"""WGAN-div training loop (Wu et al. 2018) with light augmentation of the real batch."""
import random
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    latent_dim: int = 16
    image_size: int = 8
    channels: int = 1
    batch_size: int = 16
    n_critic: int = 2
    iters: int = 3
    lr: float = 2e-4
    betas: tuple = (0.5, 0.999)
    k: float = 2.0
    p: float = 6.0
    aug_noise: float = 0.05
    seed: int = 0


class Generator(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        out = cfg.channels * cfg.image_size * cfg.image_size
        self.main = nn.Sequential(
            nn.Linear(cfg.latent_dim, 64), nn.LeakyReLU(0.2, inplace=True),
            nn.Linear(64, 128), nn.LeakyReLU(0.2, inplace=True),
            nn.Linear(128, out), nn.Tanh())

    def forward(self, z):
        return self.main(z).view(z.size(0), self.cfg.channels, self.cfg.image_size, self.cfg.image_size)


class Discriminator(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(cfg.channels, 16, 3, 2, 1), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(16, 32, 3, 2, 1), nn.LeakyReLU(0.2, inplace=True),
            nn.Flatten(), nn.Linear(32 * (cfg.image_size // 4) ** 2, 1))

    def forward(self, x):
        return self.main(x)


class RealAugment:
    def __init__(self, noise, gen):
        self.noise = noise
        self.gen = gen

    def __call__(self, x):
        if torch.rand(1, generator=self.gen).item() < 0.5:
            x = torch.flip(x, dims=[3])
        shift = int(torch.randint(-1, 2, (1,), generator=self.gen))
        x = torch.roll(x, shifts=shift, dims=2)
        return x + self.noise * torch.randn(x.shape, generator=self.gen)


def synthetic_dataloader(cfg, rng):
    while True:
        base = rng.uniform(-1, 1, size=(cfg.batch_size, cfg.channels, 1, cfg.image_size)).astype(np.float32)
        yield torch.from_numpy(np.repeat(base, cfg.image_size, axis=2)), None


class WGANDivTrainer:
    def __init__(self, cfg):
        self.cfg = cfg
        self.netG = Generator(cfg)
        self.netD = Discriminator(cfg)
        self.optimizerG = torch.optim.Adam(self.netG.parameters(), lr=cfg.lr, betas=cfg.betas)
        self.optimizerD = torch.optim.Adam(self.netD.parameters(), lr=cfg.lr, betas=cfg.betas)
        self.augment = RealAugment(cfg.aug_noise, torch.Generator().manual_seed(cfg.seed))

    def divergence_penalty(self, real_data, real_outputs, fake_data, fake_outputs):
        cfg = self.cfg
        real_grad_outputs = torch.ones_like(real_outputs)
        real_gradient = torch.autograd.grad(outputs=real_outputs, inputs=real_data, grad_outputs=real_grad_outputs, create_graph=True, retain_graph=True, only_inputs=True)[0]
        real_gradient_norm = real_gradient.view(real_gradient.size(0), -1).pow(2).sum(1) ** (cfg.p / 2)

        fake_grad_outputs = torch.ones_like(fake_outputs)
        fake_gradient = torch.autograd.grad(outputs=fake_outputs, inputs=fake_data, grad_outputs=fake_grad_outputs, create_graph=True, retain_graph=True, only_inputs=True)[0]
        fake_gradient_norm = fake_gradient.view(fake_gradient.size(0), -1).pow(2).sum(1) ** (cfg.p / 2)
        return torch.mean(real_gradient_norm + fake_gradient_norm) * cfg.k / 2

    def discriminator_step(self, real_images):
        cfg = self.cfg
        with torch.no_grad():
            real_inputs = self.augment(real_images)
        real_inputs.requires_grad_(True)
        noise = torch.randn(real_images.size(0), cfg.latent_dim)
        fake_images = self.netG(noise).detach().requires_grad_(True)

        self.optimizerD.zero_grad()
        real_outputs = self.netD(real_inputs)
        fake_outputs = self.netD(fake_images)
        errD_real = -torch.mean(real_outputs)
        errD_fake = torch.mean(fake_outputs)
        div = self.divergence_penalty(real_inputs, real_outputs, fake_images, fake_outputs)
        errD = errD_real + errD_fake + div
        errD.backward()
        self.optimizerD.step()
        return errD.item(), div.item()

    def generator_step(self):
        self.optimizerG.zero_grad()
        noise = torch.randn(self.cfg.batch_size, self.cfg.latent_dim)
        errG = -torch.mean(self.netD(self.netG(noise)))
        errG.backward()
        self.optimizerG.step()
        return errG.item()

    def run(self):
        rng = np.random.default_rng(self.cfg.seed)
        loader = synthetic_dataloader(self.cfg, rng)
        for i in range(self.cfg.iters):
            for _ in range(self.cfg.n_critic):
                real_images, _ = next(loader)
                errD, div = self.discriminator_step(real_images)
            errG = self.generator_step()
            print(f"[{i}/{self.cfg.iters}] Loss_D: {errD:.4f} div: {div:.4f} Loss_G: {errG:.4f}")


def main():
    cfg = Config()
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    WGANDivTrainer(cfg).run()


if __name__ == "__main__":
    main()
