# expect: freed_graph
# source: https://github.com/meta-pytorch/botorch/issues/2253
"""Bayesian-optimisation hyper-parameter tuner for a small regression network.

A BoTorch-style loop written in plain torch: an exact GP surrogate with an RBF
kernel is fitted by maximising the marginal log likelihood (Adam + step
scheduler, like fit_gpytorch_mll), Expected Improvement is optimised over the
unit cube by gradient ascent, and every candidate configuration (log-lr,
weight decay, width) is evaluated by training the inner model for a few epochs
and reporting its validation loss.
"""
import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class TunerConfig:
    n_init: int = 4
    n_iterations: int = 3
    gp_fit_steps: int = 25
    gp_lr: float = 0.1
    acq_restarts: int = 4
    acq_steps: int = 20
    inner_epochs: int = 3
    seed: int = 0
    bounds: dict = field(default_factory=lambda: {
        "log_lr": (-4.0, -1.0), "weight_decay": (0.0, 0.1), "width": (8.0, 64.0)})


def make_regression_data(n=256, d=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g)
    w = torch.randn(d, 1, generator=g)
    y = torch.sin(X @ w) + 0.1 * torch.randn(n, 1, generator=g)
    return X[:192], y[:192], X[192:], y[192:]


class InnerRegressor(nn.Module):
    def __init__(self, d_in, width):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, width), nn.Tanh(), nn.Linear(width, 1))

    def forward(self, x):
        return self.net(x)


class ObjectiveRunner:
    """Trains the inner model for one configuration and returns the val loss."""

    def __init__(self, cfg, data):
        self.cfg = cfg
        self.Xtr, self.ytr, self.Xva, self.yva = data
        self.criterion = nn.MSELoss()
        self.names = list(cfg.bounds)

    def unnormalize(self, x_unit):
        out = {}
        for i, name in enumerate(self.names):
            lo, hi = self.cfg.bounds[name]
            out[name] = lo + (hi - lo) * float(x_unit[i])
        return out

    def train_step(self, model, opt, xb, yb):
        opt.zero_grad()
        loss = self.criterion(model(xb), yb)
        loss.backward()
        opt.step()
        return loss.item()

    def evaluate(self, model):
        model.eval()
        val_loss = self.criterion(model(self.Xva), self.yva)
        return val_loss

    def __call__(self, x_unit):
        hp = self.unnormalize(x_unit)
        model = InnerRegressor(self.Xtr.shape[1], int(round(hp["width"])))
        opt = torch.optim.AdamW(model.parameters(), lr=10 ** hp["log_lr"], weight_decay=hp["weight_decay"])
        for _ in range(self.cfg.inner_epochs):
            for xb, yb in zip(self.Xtr.split(32), self.ytr.split(32)):
                self.train_step(model, opt, xb, yb)
        return self.evaluate(model)


class ExactGP(nn.Module):
    """Zero-mean GP with ARD RBF kernel and Gaussian likelihood."""

    def __init__(self, train_X, train_Y):
        super().__init__()
        d = train_X.shape[-1]
        self.raw_lengthscale = nn.Parameter(torch.zeros(d))
        self.raw_outputscale = nn.Parameter(torch.zeros(()))
        self.raw_noise = nn.Parameter(torch.full((), -2.0))
        self.set_train_data(train_X, train_Y)
        self._posterior_cache = None

    def set_train_data(self, X, Y):
        self.train_X = X
        self.y_mean = Y.mean()
        self.y_std = Y.std().clamp_min(1e-6)
        self.train_Y = (Y - self.y_mean) / self.y_std

    @property
    def lengthscale(self):
        return F.softplus(self.raw_lengthscale) + 1e-3

    @property
    def noise(self):
        return F.softplus(self.raw_noise) + 1e-4

    def kernel(self, a, b):
        d2 = ((a.unsqueeze(-2) - b.unsqueeze(-3)) / self.lengthscale).pow(2).sum(-1)
        return F.softplus(self.raw_outputscale) * torch.exp(-0.5 * d2)

    def marginal_log_likelihood(self):
        n = self.train_X.shape[0]
        K = self.kernel(self.train_X, self.train_X) + self.noise * torch.eye(n)
        L = torch.linalg.cholesky(K)
        alpha = torch.cholesky_solve(self.train_Y, L)
        quad = (self.train_Y * alpha).sum()
        logdet = 2 * torch.log(torch.diagonal(L)).sum()
        return -0.5 * (quad + logdet + n * math.log(2 * math.pi)) / n

    def posterior(self, Xc):
        if self._posterior_cache is None:
            with torch.no_grad():
                n = self.train_X.shape[0]
                K = self.kernel(self.train_X, self.train_X) + self.noise * torch.eye(n)
                L = torch.linalg.cholesky(K)
                self._posterior_cache = (L, torch.cholesky_solve(self.train_Y.detach(), L))
        L, alpha = self._posterior_cache
        Ks = self.kernel(Xc, self.train_X)
        mean = Ks @ alpha
        v = torch.cholesky_solve(Ks.transpose(-1, -2), L)
        var = (F.softplus(self.raw_outputscale) - (Ks * v.transpose(-1, -2)).sum(-1, keepdim=True)).clamp_min(1e-9)
        return mean * self.y_std + self.y_mean, var.sqrt() * self.y_std


def fit_gp_mll(gp, steps, lr):
    optimizer = torch.optim.Adam(gp.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.5)
    for _ in range(steps):
        optimizer.zero_grad()
        loss = -gp.marginal_log_likelihood()
        loss.backward()  # raises
        optimizer.step()
        scheduler.step()
    gp._posterior_cache = None
    return gp


def expected_improvement(gp, Xc, best_f):
    mean, std = gp.posterior(Xc)
    z = (best_f - mean) / std  # minimisation
    normal = torch.distributions.Normal(0.0, 1.0)
    return (std * (z * normal.cdf(z) + normal.log_prob(z).exp())).squeeze(-1)


def optimize_acqf(gp, best_f, d, cfg):
    x = torch.rand(cfg.acq_restarts, d, requires_grad=True)
    opt = torch.optim.Adam([x], lr=0.05)
    for _ in range(cfg.acq_steps):
        opt.zero_grad()
        (-expected_improvement(gp, x, best_f).sum()).backward()
        opt.step()
        with torch.no_grad():
            x.clamp_(0.0, 1.0)
    with torch.no_grad():
        ei = expected_improvement(gp, x, best_f)
    return x[ei.argmax()].detach()


class BayesOptTuner:
    def __init__(self, cfg, objective):
        self.cfg = cfg
        self.objective = objective
        self.d = len(cfg.bounds)
        self.train_X = torch.empty(0, self.d)
        self.train_Y = torch.empty(0, 1)

    def observe(self, x):
        y = self.objective(x)
        self.train_X = torch.cat([self.train_X, x.view(1, -1)])
        self.train_Y = torch.cat([self.train_Y, y.view(1, 1)])
        return y

    def run(self):
        for x in torch.rand(self.cfg.n_init, self.d):
            self.observe(x)
        for it in range(self.cfg.n_iterations):
            gp = fit_gp_mll(ExactGP(self.train_X, self.train_Y), self.cfg.gp_fit_steps, self.cfg.gp_lr)
            best_f = self.train_Y.min().item()
            cand = optimize_acqf(gp, best_f, self.d, self.cfg)
            y = self.observe(cand)
            print("iter %d  cand %s  val_loss %.4f  best %.4f" % (it, self.objective.unnormalize(cand), float(y), best_f))
        best = self.train_Y.argmin()
        return self.objective.unnormalize(self.train_X[best]), float(self.train_Y[best])


def main():
    cfg = TunerConfig()
    torch.manual_seed(cfg.seed)
    runner = ObjectiveRunner(cfg, make_regression_data(seed=cfg.seed))
    best_hp, best_val = BayesOptTuner(cfg, runner).run()
    print("best configuration", best_hp, "val loss %.4f" % best_val)


if __name__ == "__main__":
    main()
