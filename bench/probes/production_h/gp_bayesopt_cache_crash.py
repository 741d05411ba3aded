# expect: freed_graph
# source: https://github.com/cornellius-gp/gpytorch/pull/228
"""Bayesian optimisation loop with an exact GP surrogate (ARD RBF kernel),
type-II ML hyper-parameter fitting and gradient-based maximisation of
expected improvement from several random restarts."""
import math
import time
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)
torch.set_default_dtype(torch.float64)

CFG = SimpleNamespace(
    dim=2, n_init=8, bo_rounds=3,
    fit=SimpleNamespace(steps=40, lr=0.05, gamma=0.95),
    acq=SimpleNamespace(restarts=4, steps=15, lr=0.05),
    bounds=((-5.0, 10.0), (0.0, 15.0)),
    jitter=1e-6,
)


def branin(x):
    x1, x2 = x[..., 0], x[..., 1]
    a, b, c, r, s, t = 1.0, 5.1 / (4 * math.pi ** 2), 5 / math.pi, 6.0, 10.0, 1 / (8 * math.pi)
    return a * (x2 - b * x1 ** 2 + c * x1 - r) ** 2 + s * (1 - t) * torch.cos(x1) + s


class Normalize:
    def __init__(self, bounds):
        b = torch.tensor(bounds)
        self.lo, self.hi = b[:, 0], b[:, 1]

    def forward(self, x):
        return (x - self.lo) / (self.hi - self.lo)

    def untransform(self, u):
        return self.lo + u * (self.hi - self.lo)


class Standardize:
    def fit(self, y):
        self.mean, self.std = y.mean(), y.std().clamp_min(1e-9)
        return (y - self.mean) / self.std


class ExactGP(nn.Module):
    def __init__(self, dim, jitter):
        super().__init__()
        self.raw_lengthscale = nn.Parameter(torch.zeros(dim))
        self.raw_outputscale = nn.Parameter(torch.tensor(0.0))
        self.raw_noise = nn.Parameter(torch.tensor(-3.0))
        self.constant = nn.Parameter(torch.tensor(0.0))
        self.jitter = jitter
        self.train_x = self.train_y = None
        self._cache = {}

    @property
    def lengthscale(self):
        return F.softplus(self.raw_lengthscale) + 1e-4

    @property
    def outputscale(self):
        return F.softplus(self.raw_outputscale)

    @property
    def noise(self):
        return F.softplus(self.raw_noise) + 1e-6

    def kernel(self, a, b):
        d = (a.unsqueeze(-2) - b.unsqueeze(-3)) / self.lengthscale
        return self.outputscale * torch.exp(-0.5 * (d ** 2).sum(-1))

    def set_train_data(self, x, y):
        self.train_x, self.train_y = x, y
        self._cache = {}

    def train(self, mode=True):
        if mode:
            self._cache = {}
        return super().train(mode)

    def marginal_log_likelihood(self):
        x, y = self.train_x, self.train_y
        n = x.shape[0]
        K = self.kernel(x, x) + (self.noise + self.jitter) * torch.eye(n)
        L = torch.linalg.cholesky(K)
        r = (y - self.constant).unsqueeze(-1)
        alpha = torch.cholesky_solve(r, L)
        return (-0.5 * (r * alpha).sum() - torch.log(torch.diagonal(L)).sum() - 0.5 * n * math.log(2 * math.pi)) / n

    def _prediction_cache(self):
        if "L" not in self._cache:
            x, y = self.train_x, self.train_y
            K = self.kernel(x, x) + (self.noise + self.jitter) * torch.eye(x.shape[0])
            L = torch.linalg.cholesky(K)
            self._cache["L"] = L
            self._cache["alpha"] = torch.cholesky_solve((y - self.constant).unsqueeze(-1), L)
        return self._cache["L"], self._cache["alpha"]

    def posterior(self, x):
        assert not self.training, "call model.eval() before predicting"
        L, alpha = self._prediction_cache()
        Ks = self.kernel(x, self.train_x)
        mean = self.constant + (Ks @ alpha).squeeze(-1)
        v = torch.linalg.solve_triangular(L, Ks.transpose(-1, -2), upper=False)
        var = (self.outputscale - (v ** 2).sum(-2)).clamp_min(1e-9)
        return mean, var


class ExpectedImprovement(nn.Module):
    def __init__(self, model, best_f):
        super().__init__()
        self.model, self.best_f = model, best_f
        self.normal = torch.distributions.Normal(0.0, 1.0)

    def forward(self, x):
        mean, var = self.model.posterior(x)
        sigma = var.sqrt()
        u = (self.best_f - mean) / sigma
        return sigma * (u * self.normal.cdf(u) + self.normal.log_prob(u).exp())


def fit_gp(model, cfg):
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=cfg.fit.lr)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=cfg.fit.gamma)
    for step in range(cfg.fit.steps):
        opt.zero_grad()
        loss = -model.marginal_log_likelihood()
        loss.backward()
        opt.step()
        sched.step()
    model.eval()
    return loss.item()


def optimize_acqf(acqf, cfg, gen):
    x = torch.rand(cfg.acq.restarts, cfg.dim, generator=gen).requires_grad_(True)
    opt = torch.optim.Adam([x], lr=cfg.acq.lr)
    for step in range(cfg.acq.steps):
        opt.zero_grad()
        loss = -acqf(x).sum()
        loss.backward()  # raises
        opt.step()
        with torch.no_grad():
            x.clamp_(0.0, 1.0)
    with torch.no_grad():
        final = acqf(x)
    best = final.argmax()
    return x[best].detach(), final[best].item()


def main():
    cfg = CFG
    gen = torch.Generator().manual_seed(11)
    tf = Normalize(cfg.bounds)
    X = tf.untransform(torch.rand(cfg.n_init, cfg.dim, generator=gen))
    Y = branin(X)
    model = ExactGP(cfg.dim, cfg.jitter)
    t0 = time.time()
    for rnd in range(cfg.bo_rounds):
        ystd = Standardize()
        model.set_train_data(tf.forward(X), ystd.fit(Y))
        nll = fit_gp(model, cfg)
        acqf = ExpectedImprovement(model, best_f=model.train_y.min())
        cand_u, ei = optimize_acqf(acqf, cfg, gen)
        cand = tf.untransform(cand_u).unsqueeze(0)
        X, Y = torch.cat([X, cand]), torch.cat([Y, branin(cand)])
        print(f"round {rnd} nll {nll:.3f} ei {ei:.4f} y_new {Y[-1].item():.3f} best {Y.min().item():.3f} "
              f"ls {model.lengthscale.detach().numpy().round(3)} ({time.time() - t0:.1f}s)")


if __name__ == "__main__":
    main()
