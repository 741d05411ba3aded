# expect: inplace_version
# source: https://github.com/pytorch/pytorch/issues/39141
"""1-D curve GAN: the generator learns to paint parabolas between two bounds."""
import time
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn


CONFIG = SimpleNamespace(
    batch_size=64,
    lr_g=1e-4,
    lr_d=1e-4,
    n_ideas=5,
    art_components=15,
    hidden=128,
    steps=30,
    log_every=10,
    betas=(0.5, 0.999),
    seed=0,
)


class ArtistSampler:
    """Real samples: a * x^2 + (a - 1) for a ~ U(1, 2)."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.points = np.vstack([np.linspace(-1, 1, cfg.art_components)
                                 for _ in range(cfg.batch_size)])

    def sample(self):
        a = np.random.uniform(1, 2, size=self.cfg.batch_size)[:, np.newaxis]
        paintings = a * np.power(self.points, 2) + (a - 1)
        return torch.from_numpy(paintings).float()


class Generator(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(cfg.n_ideas, cfg.hidden),
            nn.ReLU(),
            nn.Linear(cfg.hidden, cfg.art_components),
        )

    def forward(self, z):
        return self.body(z)


class Discriminator(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(cfg.art_components, cfg.hidden),
            nn.ReLU(),
            nn.Linear(cfg.hidden, 1),
            nn.Sigmoid(),
        )

    def forward(self, x):
        return self.body(x)


class MetricTracker:
    def __init__(self):
        self.history = {}

    def update(self, **kwargs):
        for k, v in kwargs.items():
            self.history.setdefault(k, []).append(float(v))

    def mean(self, key, last=10):
        vals = self.history.get(key, [])[-last:]
        return sum(vals) / max(len(vals), 1)


class GANTrainer:
    def __init__(self, cfg):
        self.cfg = cfg
        self.G = Generator(cfg)
        self.D = Discriminator(cfg)
        self.opt_G = torch.optim.Adam(self.G.parameters(), lr=cfg.lr_g, betas=cfg.betas)
        self.opt_D = torch.optim.Adam(self.D.parameters(), lr=cfg.lr_d, betas=cfg.betas)
        self.sampler = ArtistSampler(cfg)
        self.metrics = MetricTracker()
        self.eps = 1e-8

    def sample_ideas(self):
        return torch.randn(self.cfg.batch_size, self.cfg.n_ideas, requires_grad=True)

    def discriminator_loss(self, prob_real, prob_fake):
        return -torch.mean(torch.log(prob_real + self.eps) + torch.log(1.0 - prob_fake + self.eps))

    def generator_loss(self, prob_fake):
        return torch.mean(torch.log(1.0 - prob_fake + self.eps))

    def train_step(self, step):
        real = self.sampler.sample()
        ideas = self.sample_ideas()
        fake = self.G(ideas)

        prob_real = self.D(real)
        prob_fake = self.D(fake)

        d_loss = self.discriminator_loss(prob_real, prob_fake)
        g_loss = self.generator_loss(prob_fake)

        self.opt_D.zero_grad()
        d_loss.backward(retain_graph=True)
        self.opt_D.step()

        self.opt_G.zero_grad()
        g_loss.backward()  # raises
        self.opt_G.step()

        self.metrics.update(d_loss=d_loss.item(), g_loss=g_loss.item(),
                            d_acc=prob_real.mean().item(), fake_mean=fake.mean().item())
        return fake.detach()

    def within_bounds(self, paintings):
        x = torch.from_numpy(self.sampler.points[0]).float()
        upper = 2 * x ** 2 + 1
        lower = x ** 2
        inside = (paintings <= upper) & (paintings >= lower)
        return inside.float().mean().item()

    def fit(self):
        t0 = time.time()
        for step in range(self.cfg.steps):
            fake = self.train_step(step)
            if step % self.cfg.log_every == 0:
                print("step %4d  D=%.3f  G=%.3f  D(real)=%.2f  in-bounds=%.2f" % (
                    step, self.metrics.mean("d_loss"), self.metrics.mean("g_loss"),
                    self.metrics.mean("d_acc"), self.within_bounds(fake)))
        print("trained %d steps in %.2fs" % (self.cfg.steps, time.time() - t0))


def main():
    torch.manual_seed(CONFIG.seed)
    np.random.seed(CONFIG.seed)
    trainer = GANTrainer(CONFIG)
    trainer.fit()


if __name__ == "__main__":
    main()
