# expect: clean
# source: https://whosebug.com/question/5232549/How-does-PyTorch-s-loss-backward-work-when-retain-graph-True-is-specified
"""DCGAN on synthetic 32x32 RGB "texture" images, generator-first update schedule.

The trainer follows the schedule used in the original question: both losses are computed
from one forward pass, the generator is updated first, then the discriminator.  Around the
training step sit the usual pieces of a small GAN project: a dataclass config, two Adam
optimizers with their own LR schedulers, an EMA copy of the generator kept by a callback,
a loss logger callback, and an `evaluate` pass comparing sample statistics with real data.
"""
import copy
import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GANConfig:
    image_size: int = 32
    channels: int = 3
    z_dim: int = 32
    g_features: int = 16
    d_features: int = 16
    batch_size: int = 8
    num_batches: int = 4
    epochs: int = 2
    lr_g: float = 2e-4
    lr_d: float = 2e-4
    betas: tuple = (0.5, 0.999)
    lr_decay_every: int = 4
    ema_decay: float = 0.99
    label_smoothing: float = 0.9
    seed: int = 0
    log_every: int = 2
    extra: dict = field(default_factory=lambda: {'eval_samples': 16})


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find('Conv') != -1:
        nn.init.normal_(m.weight.data, 0.0, 0.02)
    elif classname.find('BatchNorm') != -1:
        nn.init.normal_(m.weight.data, 1.0, 0.02)
        nn.init.constant_(m.bias.data, 0)


class Generator(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        nf = cfg.g_features
        self.z_dim = cfg.z_dim
        self.main = nn.Sequential(
            nn.ConvTranspose2d(cfg.z_dim, nf * 4, 4, 1, 0, bias=False), nn.BatchNorm2d(nf * 4), nn.ReLU(True),
            nn.ConvTranspose2d(nf * 4, nf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(nf * 2), nn.ReLU(True),
            nn.ConvTranspose2d(nf * 2, nf, 4, 2, 1, bias=False), nn.BatchNorm2d(nf), nn.ReLU(True),
            nn.ConvTranspose2d(nf, cfg.channels, 4, 2, 1, bias=False), nn.Tanh(),
        )

    def forward(self, z):
        return self.main(z.view(z.size(0), self.z_dim, 1, 1))


class Discriminator(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        nf = cfg.d_features
        self.main = nn.Sequential(
            nn.Conv2d(cfg.channels, nf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(nf, nf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(nf * 2), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(nf * 2, nf * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(nf * 4), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(nf * 4, 1, 4, 1, 0, bias=False),
        )

    def forward(self, x):
        return self.main(x).view(-1)


class TextureDataset(torch.utils.data.Dataset):
    """Procedural stripes + noise standing in for the image folder."""

    def __init__(self, cfg, n):
        g = torch.Generator().manual_seed(cfg.seed)
        xs = torch.linspace(0, 2 * math.pi, cfg.image_size)
        freq = torch.randint(1, 5, (n, 1, 1, 1), generator=g).float()
        phase = torch.rand(n, cfg.channels, 1, 1, generator=g) * 2 * math.pi
        stripes = torch.sin(freq * xs.view(1, 1, 1, -1) + phase)
        self.images = (stripes + 0.1 * torch.randn(n, cfg.channels, cfg.image_size, cfg.image_size,
                                                  generator=g)).clamp(-1, 1)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return self.images[i]


class Callback:
    def on_step_end(self, trainer, step, logs):
        pass

    def on_epoch_end(self, trainer, epoch, logs):
        pass


class EMACallback(Callback):
    def __init__(self, decay):
        self.decay = decay

    def on_step_end(self, trainer, step, logs):
        with torch.no_grad():
            for p_ema, p in zip(trainer.g_ema.parameters(), trainer.generator.parameters()):
                p_ema.mul_(self.decay).add_(p, alpha=1 - self.decay)


class LossLogger(Callback):
    def __init__(self, every):
        self.every, self.history = every, []

    def on_step_end(self, trainer, step, logs):
        self.history.append(logs)
        if step % self.every == 0:
            print('[step %d] loss_g %.4f loss_d %.4f lr_g %.2e' % (step, logs['loss_g'], logs['loss_d'],
                                                                  trainer.optim_g.param_groups[0]['lr']))

    def on_epoch_end(self, trainer, epoch, logs):
        print('epoch %d: %s' % (epoch, {k: round(v, 4) for k, v in logs.items()}))


class GANTrainer:
    def __init__(self, cfg, callbacks=()):
        self.cfg = cfg
        self.generator = Generator(cfg)
        self.discriminator = Discriminator(cfg)
        self.generator.apply(weights_init)
        self.discriminator.apply(weights_init)
        self.g_ema = copy.deepcopy(self.generator).eval()
        for p in self.g_ema.parameters():
            p.requires_grad_(False)
        self.optim_g = torch.optim.Adam(self.generator.parameters(), lr=cfg.lr_g, betas=cfg.betas)
        self.optim_d = torch.optim.Adam(self.discriminator.parameters(), lr=cfg.lr_d, betas=cfg.betas)
        self.sched_g = torch.optim.lr_scheduler.StepLR(self.optim_g, cfg.lr_decay_every, gamma=0.5)
        self.sched_d = torch.optim.lr_scheduler.StepLR(self.optim_d, cfg.lr_decay_every, gamma=0.5)
        self.criterion = nn.BCEWithLogitsLoss()
        self.callbacks = list(callbacks)
        self.global_step = 0

    def sample_z(self, n):
        return torch.randn(n, self.cfg.z_dim)

    def real_labels(self, n):
        return torch.full((n,), self.cfg.label_smoothing)

    def compute_losses(self, real):
        n = real.size(0)
        fake = self.generator(self.sample_z(n))
        loss_g = self.criterion(self.discriminator(fake), torch.ones(n))
        d_real = self.discriminator(real)
        d_fake = self.discriminator(fake.detach())
        loss_d = self.criterion(d_real, self.real_labels(n)) + self.criterion(d_fake, torch.zeros(n))
        return loss_g, loss_d

    def train_step(self, real):
        # computing loss_g and loss_d...
        loss_g, loss_d = self.compute_losses(real)

        self.optim_g.zero_grad()
        loss_g.backward()
        self.optim_g.step()

        self.optim_d.zero_grad()
        loss_d.backward()
        self.optim_d.step()
        return {'loss_g': loss_g.item(), 'loss_d': loss_d.item()}

    @torch.no_grad()
    def evaluate(self, loader):
        real = torch.cat([b for b in loader])
        fake = self.g_ema(self.sample_z(self.cfg.extra['eval_samples']))
        return {'mean_gap': (real.mean() - fake.mean()).abs().item(),
                'std_gap': (real.std() - fake.std()).abs().item()}

    def fit(self, loader):
        for epoch in range(self.cfg.epochs):
            self.generator.train()
            self.discriminator.train()
            for real in loader:
                logs = self.train_step(real)
                self.global_step += 1
                for cb in self.callbacks:
                    cb.on_step_end(self, self.global_step, logs)
            self.sched_g.step()
            self.sched_d.step()
            eval_logs = self.evaluate(loader)
            for cb in self.callbacks:
                cb.on_epoch_end(self, epoch, eval_logs)


def main():
    cfg = GANConfig()
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(1)
    dataset = TextureDataset(cfg, cfg.batch_size * cfg.num_batches)
    loader = torch.utils.data.DataLoader(dataset, batch_size=cfg.batch_size, shuffle=True,
                                         generator=torch.Generator().manual_seed(cfg.seed))
    trainer = GANTrainer(cfg, callbacks=[EMACallback(cfg.ema_decay), LossLogger(cfg.log_every)])
    trainer.fit(loader)


if __name__ == '__main__':
    main()
