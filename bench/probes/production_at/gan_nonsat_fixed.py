# expect: clean
# source: https://php.bkmy88.com/faq/1575425.html
"""Small fully-connected GAN on synthetic 2-D "image" vectors.

Mirrors a course-assignment style layout: a Generator / Discriminator pair,
a loss module with `loss_nonsaturating`, a `Trainer` that owns both Adam
optimizers and a step-decay scheduler, simple callbacks and a `main()`.
"""
import argparse
import functools
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


# ----------------------------------------------------------------------------
# utils
# ----------------------------------------------------------------------------
def timed(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        t0 = time.time()
        out = fn(*args, **kwargs)
        wrapper.last_elapsed = time.time() - t0
        return out
    wrapper.last_elapsed = 0.0
    return wrapper


def make_dataset(n, dim, seed=0):
    rng = np.random.RandomState(seed)
    centers = rng.randn(4, dim).astype(np.float32) * 2.0
    idx = rng.randint(0, 4, size=n)
    x = centers[idx] + 0.3 * rng.randn(n, dim).astype(np.float32)
    return torch.from_numpy(np.tanh(x))


def iterate_minibatches(x, batch_size, generator):
    perm = torch.randperm(x.shape[0], generator=generator)
    for i in range(0, x.shape[0] - batch_size + 1, batch_size):
        yield x[perm[i:i + batch_size]]


# ----------------------------------------------------------------------------
# models
# ----------------------------------------------------------------------------
class Generator(nn.Module):
    def __init__(self, z_dim, out_dim, hidden=64):
        super().__init__()
        self.z_dim = z_dim
        self.net = nn.Sequential(
            nn.Linear(z_dim, hidden),
            nn.LeakyReLU(0.2),
            nn.Linear(hidden, hidden),
            nn.LeakyReLU(0.2),
            nn.Linear(hidden, out_dim),
            nn.Tanh(),
        )

    def forward(self, z):
        return self.net(z)

    @torch.no_grad()
    def sample(self, n, device):
        z = torch.randn(n, self.z_dim, device=device)
        return self(z)


class Discriminator(nn.Module):
    def __init__(self, in_dim, hidden=64):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_dim, hidden),
            nn.LeakyReLU(0.2),
            nn.Linear(hidden, hidden),
            nn.LeakyReLU(0.2),
            nn.Linear(hidden, 1),
        )

    def forward(self, x):
        return self.net(x).squeeze(-1)


# ----------------------------------------------------------------------------
# losses
# ----------------------------------------------------------------------------
def loss_nonsaturating(d, g, x_real, *, device):
    """Returns (d_loss, g_loss) for the non-saturating GAN objective."""
    z = torch.randn(x_real.shape[0], g.z_dim, device=device)
    gz = g(z)
    dgz = torch.sigmoid(d(gz))
    dgz_detached = torch.sigmoid(d(gz.detach()))
    dx = torch.sigmoid(d(x_real))

    real_label = torch.ones(x_real.shape[0], device=device)
    fake_label = torch.zeros(x_real.shape[0], device=device)
    bce = nn.BCELoss()

    d_loss = bce(dx, real_label) + bce(dgz_detached, fake_label)
    g_loss = bce(dgz, real_label)
    return d_loss, g_loss


LOSSES = {"nonsaturating": loss_nonsaturating}


# ----------------------------------------------------------------------------
# training
# ----------------------------------------------------------------------------
class LossLogger:
    def __init__(self, every):
        self.every = every
        self.history = []

    def __call__(self, trainer, step, logs):
        self.history.append(logs)
        if step % self.every == 0:
            print("step %4d | d_loss %.4f | g_loss %.4f | lr %.2e"
                  % (step, logs["d_loss"], logs["g_loss"], logs["lr"]))


class Trainer:
    def __init__(self, g, d, args, callbacks=()):
        self.g = g
        self.d = d
        self.args = args
        self.device = torch.device(args.device)
        self.loss_fn = LOSSES[args.loss_type]
        self.g_optimizer = torch.optim.Adam(g.parameters(), lr=args.lr, betas=(0.5, 0.999))
        self.d_optimizer = torch.optim.Adam(d.parameters(), lr=args.lr, betas=(0.5, 0.999))
        self.g_scheduler = torch.optim.lr_scheduler.StepLR(self.g_optimizer, step_size=args.decay_every, gamma=0.5)
        self.d_scheduler = torch.optim.lr_scheduler.StepLR(self.d_optimizer, step_size=args.decay_every, gamma=0.5)
        self.callbacks = list(callbacks)
        self.global_step = 0

    @property
    def lr(self):
        return self.g_optimizer.param_groups[0]["lr"]

    @timed
    def train_step(self, x_real):
        self.g.train()
        self.d.train()
        d_loss, g_loss = self.loss_fn(self.d, self.g, x_real, device=self.device)

        self.g_optimizer.zero_grad()
        g_loss.backward()
        self.g_optimizer.step()

        self.d_optimizer.zero_grad()
        d_loss.backward()
        self.d_optimizer.step()
        return {"d_loss": d_loss.item(), "g_loss": g_loss.item()}

    @torch.no_grad()
    def evaluate(self, x_eval):
        self.g.eval()
        self.d.eval()
        fake = self.g.sample(x_eval.shape[0], self.device)
        d_real = torch.sigmoid(self.d(x_eval)).mean().item()
        d_fake = torch.sigmoid(self.d(fake)).mean().item()
        mean_gap = (fake.mean(0) - x_eval.mean(0)).abs().mean().item()
        return {"d_real": d_real, "d_fake": d_fake, "mean_gap": mean_gap}

    def fit(self, data, x_eval):
        gen = torch.Generator().manual_seed(self.args.seed)
        for epoch in range(self.args.epochs):
            for x_real in iterate_minibatches(data, self.args.batch_size, gen):
                self.global_step += 1
                logs = self.train_step(x_real.to(self.device))
                logs["lr"] = self.lr
                for cb in self.callbacks:
                    cb(self, self.global_step, logs)
            self.g_scheduler.step()
            self.d_scheduler.step()
            metrics = self.evaluate(x_eval)
            print("epoch %d | %s" % (epoch, ", ".join("%s=%.3f" % kv for kv in metrics.items())))
        return metrics


def parse_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--z-dim", type=int, default=8)
    p.add_argument("--x-dim", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--decay-every", type=int, default=1)
    p.add_argument("--loss-type", default="nonsaturating")
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    data = make_dataset(256, args.x_dim, seed=args.seed)
    x_eval = make_dataset(64, args.x_dim, seed=args.seed + 1)
    g = Generator(args.z_dim, args.x_dim)
    d = Discriminator(args.x_dim)
    trainer = Trainer(g, d, args, callbacks=[LossLogger(every=4)])
    metrics = trainer.fit(data, x_eval)
    assert all(math.isfinite(v) for v in metrics.values())
    print("done")


if __name__ == "__main__":
    main([])
