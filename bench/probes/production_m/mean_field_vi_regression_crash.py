# expect: freed_graph
# source: https://discuss.pytorch.org/t/defining-parameters-by-some-transformation-or-retaining-sub-graphs-but-not-the-whole-graph/50139
"""Mean-field variational inference for Bayesian linear regression.

The guide keeps its scale in log space (so the optimiser cannot make it
negative) and exposes a torch.distributions object that the rest of the code
uses without knowing how it is parameterised.  An SVI-style trainer fits the
ELBO with reparameterised samples, a callback tracks the posterior, and the
fitted guide is evaluated with posterior-predictive samples.
"""
import math
from dataclasses import dataclass, field
from typing import Callable, List

import torch
import torch.distributions as dd
import torch.nn as nn

torch.manual_seed(3)


@dataclass
class VIConfig:
    n_features: int = 4
    n_train: int = 256
    n_test: int = 64
    noise_std: float = 0.3
    prior_std: float = 1.0
    num_particles: int = 8
    lr: float = 0.02
    steps: int = 40
    lr_decay: float = 0.98
    log_every: int = 10
    callbacks: List[Callable] = field(default_factory=list)


def make_data(cfg):
    true_w = torch.randn(cfg.n_features)
    true_b = 0.5
    x = torch.randn(cfg.n_train + cfg.n_test, cfg.n_features)
    y = x @ true_w + true_b + cfg.noise_std * torch.randn(x.shape[0])
    return (x[: cfg.n_train], y[: cfg.n_train]), (x[cfg.n_train:], y[cfg.n_train:]), true_w


class MeanFieldNormal(nn.Module):
    """Fully factorised Gaussian guide q(z) = N(loc, exp(log_std)^2).

    The standard deviation is stored as log_std so that it stays positive
    during optimisation; downstream code only talks to ``self.dist``.
    """

    def __init__(self, dim, init_log_std=-1.0):
        super().__init__()
        self.loc = nn.Parameter(torch.zeros(dim))
        self.log_std = nn.Parameter(torch.full((dim,), init_log_std))
        std = torch.exp(self.log_std)
        self.dist = dd.Normal(loc=self.loc, scale=std)

    def rsample(self, n):
        return self.dist.rsample((n,))

    def log_prob(self, z):
        return self.dist.log_prob(z).sum(-1)

    def entropy(self):
        return self.dist.entropy().sum()


class BayesianLinearRegression:
    """p(w, b) p(y | x, w, b) with a Gaussian prior and a fixed noise scale."""

    def __init__(self, n_features, prior_std, noise_std):
        self.n_features = n_features
        self.prior = dd.Normal(torch.zeros(n_features + 1), prior_std * torch.ones(n_features + 1))
        self.noise_std = noise_std

    def split(self, z):
        return z[..., : self.n_features], z[..., self.n_features]

    def log_likelihood(self, z, x, y):
        w, b = self.split(z)
        mean = x @ w.unsqueeze(-1) + b.unsqueeze(-1).unsqueeze(-1)
        return dd.Normal(mean.squeeze(-1), self.noise_std).log_prob(y).sum(-1)

    def log_joint(self, z, x, y):
        return self.prior.log_prob(z).sum(-1) + self.log_likelihood(z, x, y)


class TraceELBO:
    def __init__(self, num_particles):
        self.num_particles = num_particles

    def differentiable_loss(self, model, guide, x, y):
        z = guide.rsample(self.num_particles)
        elbo = model.log_joint(z, x, y) - guide.log_prob(z)
        return -elbo.mean()


class SVI:
    def __init__(self, model, guide, optim, loss, scheduler=None):
        self.model, self.guide, self.optim, self.loss = model, guide, optim, loss
        self.scheduler = scheduler

    def step(self, x, y):
        self.optim.zero_grad()
        loss = self.loss.differentiable_loss(self.model, self.guide, x, y)
        loss.backward()  # raises
        self.optim.step()
        if self.scheduler is not None:
            self.scheduler.step()
        return loss.item()


class PosteriorTracker:
    def __init__(self):
        self.records = []

    def __call__(self, step, guide, loss):
        with torch.no_grad():
            self.records.append((step, loss, guide.log_std.exp().mean().item()))


@torch.no_grad()
def predictive_rmse(model, guide, x, y, n_samples=200):
    z = guide.rsample(n_samples)
    w, b = model.split(z)
    preds = (x @ w.t() + b).mean(-1)
    return torch.sqrt(((preds - y) ** 2).mean()).item()


def fit(cfg):
    (x_tr, y_tr), (x_te, y_te), true_w = make_data(cfg)
    model = BayesianLinearRegression(cfg.n_features, cfg.prior_std, cfg.noise_std)
    guide = MeanFieldNormal(cfg.n_features + 1)
    optim = torch.optim.Adam(guide.parameters(), lr=cfg.lr)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optim, gamma=cfg.lr_decay)
    svi = SVI(model, guide, optim, TraceELBO(cfg.num_particles), scheduler)

    for step in range(cfg.steps):
        loss = svi.step(x_tr, y_tr)
        for cb in cfg.callbacks:
            cb(step, guide, loss)
        if step % cfg.log_every == 0:
            print(f"step {step:3d}  -elbo {loss:10.3f}")

    rmse = predictive_rmse(model, guide, x_te, y_te)
    w_err = (guide.loc.detach()[: cfg.n_features] - true_w).norm().item()
    return rmse, w_err


if __name__ == "__main__":
    tracker = PosteriorTracker()
    cfg = VIConfig(callbacks=[tracker])
    rmse, w_err = fit(cfg)
    print(f"test RMSE {rmse:.3f} (noise {cfg.noise_std}), |w - w*| = {w_err:.3f}")
    print("final posterior scale", round(tracker.records[-1][2], 4), "entropy-free check", math.isfinite(rmse))
