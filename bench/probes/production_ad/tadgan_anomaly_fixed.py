# expect: clean
# source: https://github.com/naver-ai/StyleMapGAN/issues/16
"""GAN-based anomaly detection on multivariate sensor time series.

TadGAN-style setup: an encoder maps windows to a latent code, a generator maps
codes back to windows and a critic scores real versus generated windows.  The
training script follows a StyleMapGAN-like layout: a wrapper module dispatches
on a mode string ("D" / "G" / "recon"), separate optimizers for generator,
encoder and critic, an R1 penalty applied lazily every few steps, gradient
accumulation helpers and a periodic evaluation that turns reconstruction error
into anomaly scores.  Synthetic sine-plus-noise data with injected spikes.
"""
import argparse
import math

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F


class Encoder(nn.Module):
    def __init__(self, channels, window, latent):
        super().__init__()
        self.net = nn.Sequential(nn.Conv1d(channels, 32, 5, padding=2), nn.LeakyReLU(0.2),
                                 nn.Conv1d(32, 32, 5, stride=2, padding=2), nn.LeakyReLU(0.2))
        self.fc = nn.Linear(32 * (window // 2), latent)

    def forward(self, x):
        return self.fc(self.net(x).flatten(1))


class Generator(nn.Module):
    def __init__(self, channels, window, latent):
        super().__init__()
        self.window = window
        self.fc = nn.Linear(latent, 32 * (window // 2))
        self.net = nn.Sequential(nn.LeakyReLU(0.2), nn.ConvTranspose1d(32, 32, 4, stride=2, padding=1),
                                 nn.LeakyReLU(0.2), nn.Conv1d(32, channels, 5, padding=2), nn.Tanh())

    def forward(self, z):
        return self.net(self.fc(z).view(z.size(0), 32, self.window // 2))


class Critic(nn.Module):
    def __init__(self, channels, window):
        super().__init__()
        self.net = nn.Sequential(nn.Conv1d(channels, 32, 5, stride=2, padding=2), nn.LeakyReLU(0.2),
                                 nn.Conv1d(32, 64, 5, stride=2, padding=2), nn.LeakyReLU(0.2))
        self.fc = nn.Linear(64 * (window // 4), 1)

    def forward(self, x):
        return self.fc(self.net(x).flatten(1))


class Model(nn.Module):
    """Wrapper so that every forward pass goes through one module (DDP-friendly)."""

    def __init__(self, args):
        super().__init__()
        self.args = args
        self.encoder = Encoder(args.channels, args.window, args.latent)
        self.generator = Generator(args.channels, args.window, args.latent)
        self.critic = Critic(args.channels, args.window)

    def forward(self, real, mode):
        if mode == "D":
            z = torch.randn(real.size(0), self.args.latent)
            with torch.no_grad():
                fake = self.generator(z)
            real_pred, fake_pred = self.critic(real), self.critic(fake)
            return d_logistic_loss(real_pred, fake_pred)
        if mode == "D_reg":
            real = real.detach().requires_grad_(True)
            real_pred = self.critic(real)
            return d_r1_loss(real_pred, real)
        if mode == "G":
            z = torch.randn(self.args.batch, self.args.latent)
            fake = self.generator(z)
            adv_loss = g_nonsaturating_loss(self.critic(fake))
            z_rec = self.encoder(fake)
            w_rec_loss = F.mse_loss(z_rec, z)
            return adv_loss, w_rec_loss, z
        if mode == "recon":
            return self.generator(self.encoder(real))
        raise ValueError(mode)


def d_logistic_loss(real_pred, fake_pred):
    return F.softplus(-real_pred).mean() + F.softplus(fake_pred).mean()


def d_r1_loss(real_pred, real):
    grad_real, = torch.autograd.grad(outputs=real_pred.sum(), inputs=real, create_graph=True)
    return grad_real.pow(2).reshape(grad_real.shape[0], -1).sum(1).mean()


def g_nonsaturating_loss(fake_pred):
    return F.softplus(-fake_pred).mean()


def requires_grad(model, flag=True):
    for p in model.parameters():
        p.requires_grad = flag


def make_series(args, seed):
    rng = np.random.default_rng(seed)
    t = np.arange(args.length)
    series = np.stack([np.sin(2 * math.pi * t / (20 + 5 * c)) for c in range(args.channels)], 0)
    series = series + 0.1 * rng.standard_normal(series.shape)
    labels = np.zeros(args.length)
    for s in rng.integers(args.window, args.length - args.window, size=3):
        series[:, s:s + 5] += 2.0
        labels[s:s + 5] = 1
    windows = np.stack([series[:, i:i + args.window]
                        for i in range(0, args.length - args.window, args.stride)])
    return torch.tensor(windows, dtype=torch.float32), labels


def anomaly_scores(model, windows):
    model.eval()
    with torch.no_grad():
        rec = model(windows, "recon")
        score = (rec - windows).pow(2).mean(dim=(1, 2))
    model.train()
    return score.numpy()


def train(args, windows, model, g_optim, e_optim, d_optim):
    loader = torch.split(windows[torch.randperm(len(windows))], args.batch)
    for i in range(args.iter):
        real = loader[i % len(loader)]
        if real.size(0) != args.batch:
            continue
        # critic step
        requires_grad(model.generator, False)
        requires_grad(model.encoder, False)
        requires_grad(model.critic, True)
        d_loss = model(real, "D")
        d_optim.zero_grad()
        d_loss.backward()
        d_optim.step()
        if i % args.d_reg_every == 0:
            r1_loss = model(real, "D_reg")
            d_optim.zero_grad()
            (args.r1 / 2 * r1_loss * args.d_reg_every).backward()
            d_optim.step()

        # generator / encoder step
        requires_grad(model.generator, True)
        requires_grad(model.encoder, True)
        requires_grad(model.critic, False)
        adv_loss, w_rec_loss, stylecode = model(None, "G")
        adv_loss = adv_loss.mean()
        w_rec_loss = w_rec_loss.mean()
        g_w_rec_loss = adv_loss * args.lambda_adv_loss + w_rec_loss * args.lambda_w_rec_loss
        g_optim.zero_grad()
        e_optim.zero_grad()
        g_w_rec_loss.backward()
        g_optim.step()
        e_optim.step()

        if i % args.eval_every == 0:
            scores = anomaly_scores(model, windows)
            print(f"iter {i}: d {d_loss.item():.3f} adv {adv_loss.item():.3f} "
                  f"w_rec {w_rec_loss.item():.3f} score-max {scores.max():.3f}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iter", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--channels", type=int, default=3)
    parser.add_argument("--window", type=int, default=32)
    parser.add_argument("--stride", type=int, default=4)
    parser.add_argument("--length", type=int, default=400)
    parser.add_argument("--latent", type=int, default=16)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--r1", type=float, default=10.0)
    parser.add_argument("--d_reg_every", type=int, default=4)
    parser.add_argument("--lambda_adv_loss", type=float, default=1.0)
    parser.add_argument("--lambda_w_rec_loss", type=float, default=1.0)
    parser.add_argument("--eval_every", type=int, default=2)
    args = parser.parse_args([])
    torch.manual_seed(0)
    windows, labels = make_series(args, seed=0)
    model = Model(args)
    g_optim = torch.optim.Adam(model.generator.parameters(), lr=args.lr, betas=(0.0, 0.99))
    e_optim = torch.optim.Adam(model.encoder.parameters(), lr=args.lr, betas=(0.0, 0.99))
    d_reg_ratio = args.d_reg_every / (args.d_reg_every + 1)
    d_optim = torch.optim.Adam(model.critic.parameters(), lr=args.lr * d_reg_ratio,
                               betas=(0.0, 0.99 ** d_reg_ratio))
    train(args, windows, model, g_optim, e_optim, d_optim)


if __name__ == "__main__":
    main()
