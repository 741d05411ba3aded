# expect: nonscalar_backward
# source: https://github.com/cornellius-gp/gpytorch/issues/679
"""Exact GP regression with type-II maximum likelihood, written against a
condensed GPyTorch-style API (means / kernels / likelihoods / distributions /
models / mlls) and the "simple GP regression" tutorial loop.  The inputs are
kept as an N x 1 design matrix, as is usual for multi-feature code, and the
fitted model is evaluated with the exact posterior predictive.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


# ------------------------------------------------------------------ gpytorch/distributions
class MultivariateNormal:
    """Lazily evaluated Gaussian: the covariance is only factorised when a
    density is needed, so likelihood noise can be added first."""

    def __init__(self, mean, covariance_matrix):
        self.mean = mean
        self.covariance_matrix = covariance_matrix

    @property
    def variance(self):
        return self.covariance_matrix.diagonal(dim1=-2, dim2=-1)

    def log_prob(self, value):
        diff = value - self.mean
        jitter = 1e-5 * torch.eye(self.covariance_matrix.shape[-1])
        chol = torch.linalg.cholesky(self.covariance_matrix + jitter)
        inv_quad = (torch.cholesky_solve(diff.unsqueeze(-1), chol).squeeze(-1) * diff).sum(-1)
        logdet = 2 * torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1)
        return -0.5 * (inv_quad + logdet + diff.size(-1) * math.log(2 * math.pi))


# ------------------------------------------------------------------ gpytorch/means, kernels, likelihoods
class ConstantMean(nn.Module):
    def __init__(self):
        super().__init__()
        self.constant = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        return self.constant.expand(x.shape[:-1])


class RBFKernel(nn.Module):
    def __init__(self):
        super().__init__()
        self.raw_lengthscale = nn.Parameter(torch.zeros(1))

    @property
    def lengthscale(self):
        return F.softplus(self.raw_lengthscale)

    def forward(self, x1, x2):
        x1_, x2_ = x1 / self.lengthscale, x2 / self.lengthscale
        sq_dist = (x1_.unsqueeze(-2) - x2_.unsqueeze(-3)).pow(2).sum(-1)
        return torch.exp(-0.5 * sq_dist)


class ScaleKernel(nn.Module):
    def __init__(self, base_kernel):
        super().__init__()
        self.base_kernel = base_kernel
        self.raw_outputscale = nn.Parameter(torch.zeros(1))

    @property
    def outputscale(self):
        return F.softplus(self.raw_outputscale)

    def forward(self, x1, x2=None):
        x2 = x1 if x2 is None else x2
        return self.outputscale * self.base_kernel(x1, x2)


class GaussianLikelihood(nn.Module):
    def __init__(self):
        super().__init__()
        self.raw_noise = nn.Parameter(torch.zeros(1))

    @property
    def noise(self):
        return F.softplus(self.raw_noise) + 1e-4

    def forward(self, function_dist):
        covar = function_dist.covariance_matrix + self.noise * torch.eye(function_dist.mean.shape[-1])
        return MultivariateNormal(function_dist.mean, covar)


# ------------------------------------------------------------------ gpytorch/models
class ExactGP(nn.Module):
    def __init__(self, train_inputs, train_targets, likelihood):
        super().__init__()
        self.train_inputs = train_inputs
        self.train_targets = train_targets
        self.likelihood = likelihood

    def __call__(self, x):
        if self.training:
            return self.forward(x)
        return self.posterior(x)

    def posterior(self, x):
        train_x, train_y = self.train_inputs, self.train_targets
        k_train = self.covar_module(train_x) + self.likelihood.noise * torch.eye(train_x.shape[0])
        k_cross = self.covar_module(x, train_x)
        chol = torch.linalg.cholesky(k_train)
        resid = (train_y.reshape(-1) - self.mean_module(train_x)).unsqueeze(-1)
        alpha = torch.cholesky_solve(resid, chol)
        mean = self.mean_module(x) + (k_cross @ alpha).squeeze(-1)
        v = torch.cholesky_solve(k_cross.transpose(-1, -2), chol)
        covar = self.covar_module(x) - k_cross @ v
        return MultivariateNormal(mean, covar)


# ------------------------------------------------------------------ gpytorch/mlls
class ExactMarginalLogLikelihood(nn.Module):
    def __init__(self, likelihood, model):
        super().__init__()
        self.likelihood = likelihood
        self.model = model

    def forward(self, function_dist, target):
        output = self.likelihood(function_dist)
        res = output.log_prob(target)
        # Scale by the amount of data we have
        num_data = target.size(-1)
        return res.div_(num_data)


# ------------------------------------------------------------------ tutorial script
class ExactGPModel(ExactGP):
    def __init__(self, train_x, train_y, likelihood):
        super(ExactGPModel, self).__init__(train_x, train_y, likelihood)
        self.mean_module = ConstantMean()
        self.covar_module = ScaleKernel(RBFKernel())

    def forward(self, x):
        mean_x = self.mean_module(x)
        covar_x = self.covar_module(x)
        return MultivariateNormal(mean_x, covar_x)


@dataclass
class GPConfig:
    n_train: int = 60
    n_test: int = 25
    training_iter: int = 30
    lr: float = 0.1
    noise_std: float = 0.2


def make_data(cfg):
    # N x 1 design matrices, like the rest of the feature pipeline
    train_x = torch.linspace(0, 1, cfg.n_train).unsqueeze(-1)
    train_y = torch.sin(train_x * (2 * math.pi)) + torch.randn(train_x.size()) * cfg.noise_std
    test_x = torch.linspace(0, 1, cfg.n_test).unsqueeze(-1)
    test_y = torch.sin(test_x * (2 * math.pi)).squeeze(-1)
    return train_x, train_y, test_x, test_y


def fit_gp(model, likelihood, train_x, train_y, cfg):
    model.train()
    likelihood.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=20, gamma=0.5)
    mll = ExactMarginalLogLikelihood(likelihood, model)
    for i in range(cfg.training_iter):
        optimizer.zero_grad()
        output = model(train_x)
        loss = -mll(output, train_y)
        loss.backward()  # raises
        if i % 10 == 0:
            print("Iter %d/%d - Loss: %.3f   lengthscale: %.3f   noise: %.3f" % (
                i + 1, cfg.training_iter, loss.item(),
                model.covar_module.base_kernel.lengthscale.item(), likelihood.noise.item()))
        optimizer.step()
        scheduler.step()
    return model


@torch.no_grad()
def evaluate(model, likelihood, test_x, test_y):
    model.eval()
    likelihood.eval()
    pred = likelihood(model(test_x))
    rmse = torch.sqrt(((pred.mean - test_y) ** 2).mean()).item()
    nll = -(pred.log_prob(test_y) / test_y.numel()).item()
    return rmse, nll


if __name__ == "__main__":
    cfg = GPConfig()
    train_x, train_y, test_x, test_y = make_data(cfg)
    likelihood = GaussianLikelihood()
    model = ExactGPModel(train_x, train_y, likelihood)
    fit_gp(model, likelihood, train_x, train_y, cfg)
    rmse, nll = evaluate(model, likelihood, test_x, test_y)
    print(f"test RMSE {rmse:.3f}  test NLL/point {nll:.3f}")
