# expect: numpy_requires_grad
# source: https://github.com/meta-pytorch/botorch/pull/54
"""Bayesian optimisation loop with an exact Gaussian-process surrogate (BoTorch style).

Keeps the pieces of a BoTorch/GPyTorch workflow: a SingleTaskGP with an RBF
kernel whose hyperparameters are stored as raw parameters behind softplus
constraints, an exact marginal log likelihood, fit_gpytorch_model() with Adam,
a posterior() returning mean and variance, an analytic ExpectedImprovement
acquisition, optimize_acqf() with random restarts and gradient ascent, a BO
loop that refits the model after every new observation, and a plotting
callback that collects the posterior band (as numpy arrays) for the report.
Synthetic 1-D objective, CPU only.
"""
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn


@dataclass
class BOConfig:
    n_init: int = 4
    n_iterations: int = 4
    fit_steps: int = 60
    fit_lr: float = 0.05
    num_restarts: int = 4
    raw_samples: int = 32
    acqf_steps: int = 25
    seed: int = 0


def objective(x):
    return torch.sin(6.0 * x) * x + 0.3 * torch.cos(15.0 * x)


class Positive:
    """softplus constraint as in gpytorch.constraints.Positive"""

    @staticmethod
    def transform(raw):
        return nn.functional.softplus(raw)

    @staticmethod
    def inverse_transform(value):
        return torch.log(torch.expm1(value))


class SingleTaskGP(nn.Module):
    def __init__(self, train_X, train_Y):
        super().__init__()
        self.constraint = Positive()
        self.raw_lengthscale = nn.Parameter(self.constraint.inverse_transform(torch.tensor(0.2)))
        self.raw_outputscale = nn.Parameter(self.constraint.inverse_transform(torch.tensor(1.0)))
        self.raw_noise = nn.Parameter(self.constraint.inverse_transform(torch.tensor(0.01)))
        self.mean_constant = nn.Parameter(torch.tensor(0.0))
        self.set_train_data(train_X, train_Y)

    def set_train_data(self, train_X, train_Y):
        self.train_inputs, self.train_targets = train_X, train_Y.squeeze(-1)

    @property
    def lengthscale(self):
        return self.constraint.transform(self.raw_lengthscale)

    @property
    def outputscale(self):
        return self.constraint.transform(self.raw_outputscale)

    @property
    def noise(self):
        return self.constraint.transform(self.raw_noise) + 1e-4

    def covar(self, a, b):
        d = torch.cdist(a / self.lengthscale, b / self.lengthscale)
        return self.outputscale * torch.exp(-0.5 * d ** 2)

    def train_covar(self):
        X = self.train_inputs
        return self.covar(X, X) + self.noise * torch.eye(X.shape[0])

    def posterior(self, X):
        K = self.train_covar()
        L = torch.linalg.cholesky(K)
        Ks = self.covar(X, self.train_inputs)
        resid = (self.train_targets - self.mean_constant).unsqueeze(-1)
        alpha = torch.cholesky_solve(resid, L)
        mean = self.mean_constant + (Ks @ alpha).squeeze(-1)
        v = torch.cholesky_solve(Ks.T, L)
        var = (self.outputscale - (Ks * v.T).sum(-1)).clamp_min(1e-9)
        return mean, var


class ExactMarginalLogLikelihood(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self):
        K = self.model.train_covar()
        y = self.model.train_targets - self.model.mean_constant
        L = torch.linalg.cholesky(K)
        alpha = torch.cholesky_solve(y.unsqueeze(-1), L).squeeze(-1)
        n = y.shape[0]
        return (-0.5 * (y * alpha).sum() - torch.log(torch.diagonal(L)).sum() - 0.5 * n * math.log(2 * math.pi)) / n


def fit_gpytorch_model(mll, cfg):
    optimizer = torch.optim.Adam(mll.model.parameters(), lr=cfg.fit_lr)
    for _ in range(cfg.fit_steps):
        optimizer.zero_grad()
        loss = -mll()
        loss.backward()
        optimizer.step()
    return mll.model


class ExpectedImprovement:
    def __init__(self, model, best_f):
        self.model, self.best_f = model, best_f
        self.normal = torch.distributions.Normal(0.0, 1.0)

    def __call__(self, X):
        mean, var = self.model.posterior(X)
        sigma = var.sqrt()
        u = (mean - self.best_f) / sigma
        return sigma * (torch.exp(self.normal.log_prob(u)) + u * self.normal.cdf(u))


def optimize_acqf(acq_function, bounds, cfg, gen):
    raw = bounds[0] + (bounds[1] - bounds[0]) * torch.rand(cfg.raw_samples, 1, generator=gen)
    with torch.no_grad():
        top = acq_function(raw).topk(cfg.num_restarts).indices
    X = raw[top].clone().requires_grad_(True)
    opt = torch.optim.Adam([X], lr=0.02)
    for _ in range(cfg.acqf_steps):
        opt.zero_grad()
        (-acq_function(X).sum()).backward()
        opt.step()
        with torch.no_grad():
            X.clamp_(bounds[0], bounds[1])
    with torch.no_grad():
        best = acq_function(X).argmax()
    return X[best:best + 1].detach()


class PosteriorPlotter:
    """Collects posterior mean and 2-sigma band on a grid after every iteration."""

    def __init__(self, grid):
        self.grid = grid
        self.frames = []

    def __call__(self, iteration, model, train_X, train_Y):
        mean, var = model.posterior(self.grid)
        lower, upper = mean - 2 * var.sqrt(), mean + 2 * var.sqrt()
        frame = {"x": self.grid.squeeze(-1).cpu().numpy(),
                 "mean": mean.cpu().numpy(),  # raises
                 "lower": lower.cpu().numpy(),
                 "upper": upper.cpu().numpy(),
                 "obs_x": train_X.squeeze(-1).cpu().numpy(),
                 "obs_y": train_Y.squeeze(-1).cpu().numpy()}
        self.frames.append(frame)
        width = float(np.mean(frame["upper"] - frame["lower"]))
        print("iter %d: n_obs=%d  mean band width %.4f" % (iteration, len(frame["obs_x"]), width))


def run_bo(cfg, callbacks):
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    bounds = torch.tensor([0.0, 1.0])
    train_X = torch.rand(cfg.n_init, 1, generator=gen)
    train_Y = objective(train_X)
    for iteration in range(cfg.n_iterations):
        model = SingleTaskGP(train_X, train_Y)
        mll = ExactMarginalLogLikelihood(model)
        fit_gpytorch_model(mll, cfg)
        for cb in callbacks:
            cb(iteration, model, train_X, train_Y)
        ei = ExpectedImprovement(model, best_f=train_Y.max())
        candidate = optimize_acqf(ei, bounds, cfg, gen)
        train_X = torch.cat([train_X, candidate])
        train_Y = torch.cat([train_Y, objective(candidate)])
        print("  new x=%.4f y=%.4f best=%.4f" % (candidate.item(), train_Y[-1].item(), train_Y.max().item()))
    return train_X, train_Y


def main():
    cfg = BOConfig()
    plotter = PosteriorPlotter(torch.linspace(0, 1, 25).unsqueeze(-1))
    train_X, train_Y = run_bo(cfg, [plotter])
    print("best observed value %.4f at x=%.4f" % (train_Y.max().item(), train_X[train_Y.argmax()].item()))


if __name__ == "__main__":
    main()
