# expect: no_grad_fn
# source: https://github.com/PythonOT/POT/issues/393
"""Training a generative model with an entropic Sinkhorn-divergence loss (POT-style backend).

The project vendors a trimmed copy of the parts of POT it uses: a backend abstraction
(`NumpyBackend` / `TorchBackend`, `get_backend`), `sinkhorn_log` in the log domain, `dist`, and
`bregman.empirical_sinkhorn_divergence`.  On top of that: a dataclass config, an MLP generator
pushing Gaussian noise to a 2-D target distribution (mixture of rings), a Trainer with Adam +
exponential LR decay, periodic evaluation of the divergence on fresh samples, and a main().
"""
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn


# --------------------------------------------------------------------------- backend
class NumpyBackend:
    __name__ = "numpy"

    def to_numpy(self, a):
        return a

    def from_numpy(self, a, type_as=None):
        return a

    def logsumexp(self, a, axis=None):
        amax = a.max(axis=axis, keepdims=True)
        return (amax + np.log(np.exp(a - amax).sum(axis=axis, keepdims=True))).squeeze(axis)

    def sum(self, a, axis=None):
        return a.sum(axis=axis)

    def log(self, a):
        return np.log(a)

    def exp(self, a):
        return np.exp(a)

    def zeros_like(self, a):
        return np.zeros_like(a)


class TorchBackend:
    __name__ = "torch"

    def to_numpy(self, a):
        return a.cpu().detach().numpy()

    def from_numpy(self, a, type_as=None):
        t = torch.from_numpy(a)
        return t if type_as is None else t.to(dtype=type_as.dtype, device=type_as.device)

    def logsumexp(self, a, axis=None):
        return torch.logsumexp(a, dim=axis)

    def sum(self, a, axis=None):
        return a.sum() if axis is None else a.sum(dim=axis)

    def log(self, a):
        return torch.log(a)

    def exp(self, a):
        return torch.exp(a)

    def zeros_like(self, a):
        return torch.zeros_like(a)


def get_backend(*args):
    return TorchBackend() if isinstance(args[0], torch.Tensor) else NumpyBackend()


# --------------------------------------------------------------------------- ot
def dist(x1, x2, nx):
    x1n = nx.sum(x1 ** 2, axis=1)[:, None]
    x2n = nx.sum(x2 ** 2, axis=1)[None, :]
    return x1n + x2n - 2 * (x1 @ x2.T)


def sinkhorn_log(a, b, M, reg, nx, numItermax=100):
    loga, logb = nx.log(a), nx.log(b)
    u, v = nx.zeros_like(a), nx.zeros_like(b)
    Mr = -M / reg
    for _ in range(numItermax):
        v = logb - nx.logsumexp(Mr + u[:, None], axis=0)
        u = loga - nx.logsumexp(Mr + v[None, :], axis=1)
    return nx.exp(Mr + u[:, None] + v[None, :])


def empirical_sinkhorn2(X_s, X_t, reg, a, b, nx, numIterMax=100):
    M = dist(X_s, X_t, nx)
    G = sinkhorn_log(a, b, M, reg, nx, numIterMax)
    return nx.sum(G * M)


class bregman:
    @staticmethod
    def empirical_sinkhorn_divergence(X_s, X_t, reg, a=None, b=None, numIterMax=100):
        nx = get_backend(X_s, X_t)
        X_s_np, X_t_np = nx.to_numpy(X_s), nx.to_numpy(X_t)
        ns, nt = X_s_np.shape[0], X_t_np.shape[0]
        a_np = np.full(ns, 1.0 / ns) if a is None else nx.to_numpy(a)
        b_np = np.full(nt, 1.0 / nt) if b is None else nx.to_numpy(b)
        npx = NumpyBackend()
        sinkhorn_loss_ab = empirical_sinkhorn2(X_s_np, X_t_np, reg, a_np, b_np, npx, numIterMax)
        sinkhorn_loss_a = empirical_sinkhorn2(X_s_np, X_s_np, reg, a_np, a_np, npx, numIterMax)
        sinkhorn_loss_b = empirical_sinkhorn2(X_t_np, X_t_np, reg, b_np, b_np, npx, numIterMax)
        sinkhorn_div = sinkhorn_loss_ab - 0.5 * (sinkhorn_loss_a + sinkhorn_loss_b)
        return nx.from_numpy(np.asarray(max(0.0, sinkhorn_div)), type_as=X_s)


ot = SimpleNamespace(bregman=bregman, dist=dist)


# --------------------------------------------------------------------------- model / training
@dataclass
class Config:
    seed: int = 0
    noise_dim: int = 4
    hidden: int = 64
    batch_size: int = 128
    reg: float = 0.1
    lr: float = 2e-3
    gamma: float = 0.99
    n_iter: int = 30
    eval_every: int = 10
    sinkhorn_iters: int = 50


class Generator(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.noise_dim = cfg.noise_dim
        self.net = nn.Sequential(nn.Linear(cfg.noise_dim, cfg.hidden), nn.ReLU(),
                                 nn.Linear(cfg.hidden, cfg.hidden), nn.ReLU(), nn.Linear(cfg.hidden, 2))

    def forward(self, z):
        return self.net(z)

    def sample(self, n, generator=None):
        return self(torch.randn(n, self.noise_dim, generator=generator))


def sample_rings(n, rng):
    radius = rng.choice([0.5, 1.5], size=n)
    theta = rng.uniform(0, 2 * np.pi, size=n)
    pts = np.stack([radius * np.cos(theta), radius * np.sin(theta)], axis=1)
    return (pts + 0.05 * rng.standard_normal(pts.shape)).astype(np.float32)


class Trainer:
    def __init__(self, cfg):
        self.cfg = cfg
        self.rng = np.random.default_rng(cfg.seed)
        self.model = Generator(cfg)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.lr)
        self.scheduler = torch.optim.lr_scheduler.ExponentialLR(self.optimizer, gamma=cfg.gamma)
        self.history = []

    def criterion(self, x_gen, x_data):
        return ot.bregman.empirical_sinkhorn_divergence(x_gen, x_data, self.cfg.reg,
                                                        numIterMax=self.cfg.sinkhorn_iters)

    def train_step(self, x_data):
        self.optimizer.zero_grad()
        x_gen = self.model.sample(self.cfg.batch_size)
        loss = self.criterion(x_gen, x_data)
        loss.backward()  # raises
        self.optimizer.step()
        self.scheduler.step()
        return loss.item()

    @torch.no_grad()
    def evaluate(self, n=256):
        x_data = torch.from_numpy(sample_rings(n, self.rng))
        x_gen = self.model.sample(n, generator=torch.Generator().manual_seed(123))
        return float(self.criterion(x_gen, x_data))

    def fit(self):
        for it in range(self.cfg.n_iter):
            x_data = torch.from_numpy(sample_rings(self.cfg.batch_size, self.rng))
            self.history.append(self.train_step(x_data))
            if (it + 1) % self.cfg.eval_every == 0:
                print(f"iter {it + 1}: train {np.mean(self.history[-self.cfg.eval_every:]):.4f} "
                      f"eval {self.evaluate():.4f} lr {self.scheduler.get_last_lr()[0]:.5f}")


def main():
    cfg = Config()
    torch.manual_seed(cfg.seed)
    Trainer(cfg).fit()


if __name__ == "__main__":
    main()
