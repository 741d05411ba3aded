# expect: clean
# source: https://github.com/cornellius-gp/gpytorch/issues/1389
"""Sparse Gaussian process with derivative observations (FITC), gpytorch-style.

A small re-implementation of the gpytorch pieces a Bayesian-optimisation service uses:
a Kernel base class with a positive lengthscale, an RBF kernel and an RBFKernelGrad kernel
that models values and partial derivatives jointly, an inducing-point model whose training
objective is the FITC marginal likelihood (which needs the kernel diagonal), a trainer with
Adam + StepLR, early stopping and a held-out evaluation.  Synthetic 2-D data, CPU only.
"""
import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn


@dataclass
class GPConfig:
    n_train: int = 24
    n_test: int = 10
    dim: int = 2
    n_inducing: int = 6
    approximation: str = "fitc"        # "dtc" or "fitc"
    lr: float = 0.05
    steps: int = 4
    step_size: int = 2
    gamma: float = 0.7
    jitter: float = 1e-4
    noise_init: float = 0.1
    patience: int = 3
    seed: int = 0
    tags: dict = field(default_factory=lambda: {"task": "bo-surrogate"})


def postprocess_rbf(dist_mat):
    return dist_mat.div(-2.0).exp()


class Kernel(nn.Module):
    def __init__(self, eps=1e-6):
        super().__init__()
        self.raw_log_lengthscale = nn.Parameter(torch.zeros(1, 1))
        self.eps = eps

    @property
    def lengthscale(self):
        return self.raw_log_lengthscale.exp()

    def covar_dist(self, x1, x2, square_dist=True, dist_postprocess_func=None):
        d = (x1.unsqueeze(-2) - x2.unsqueeze(-3)).pow(2).sum(-1)
        if not square_dist:
            d = d.clamp_min(1e-12).sqrt()
        return dist_postprocess_func(d) if dist_postprocess_func is not None else d

    def __call__(self, x1, x2=None, diag=False):
        x2 = x1 if x2 is None else x2
        return self.forward(x1, x2, diag=diag)


class RBFKernel(Kernel):
    def forward(self, x1, x2, diag=False):
        x1_ = x1.div(self.lengthscale)
        x2_ = x2.div(self.lengthscale)
        if diag:
            return postprocess_rbf((x1_ - x2_).pow(2).sum(-1))
        return self.covar_dist(x1_, x2_, square_dist=True, dist_postprocess_func=postprocess_rbf)


class RBFKernelGrad(RBFKernel):
    """Covariance between values and partial derivatives, ordered point-major."""

    def forward(self, x1, x2, diag=False):
        n1, d = x1.shape[-2:]
        n2 = x2.shape[-2]
        if not diag:
            x1_ = x1.div(self.lengthscale)
            x2_ = x2.div(self.lengthscale)
            outer = x1_.view(n1, 1, d) - x2_.view(1, n2, d)
            outer = outer / self.lengthscale.unsqueeze(-2)
            outer = torch.transpose(outer, -1, -2).contiguous()
            K_11 = self.covar_dist(x1_, x2_, square_dist=True, dist_postprocess_func=postprocess_rbf)
            K = torch.zeros(n1 * (d + 1), n2 * (d + 1), dtype=x1.dtype)
            K[:n1, :n2] = K_11
            outer1 = outer.view(n1, n2 * d)
            K[:n1, n2:] = outer1 * K_11.repeat([1, d])
            outer2 = outer.transpose(-1, -3).contiguous().view(n2, n1 * d).transpose(-1, -2)
            K[n1:, :n2] = -outer2 * K_11.repeat([d, 1])
            outer3 = outer1.repeat([d, 1]) * outer2.repeat([1, d])
            kp = torch.kron(torch.eye(d, dtype=x1.dtype) / self.lengthscale.pow(2), torch.ones(n1, n2))
            K[n1:, n2:] = (kp - outer3) * K_11.repeat([d, d])
            pi1 = torch.arange(n1 * (d + 1)).view(d + 1, n1).t().reshape(-1)
            pi2 = torch.arange(n2 * (d + 1)).view(d + 1, n2).t().reshape(-1)
            return K[pi1, :][:, pi2]
        kernel_diag = super().forward(x1, x2, diag=True)
        grad_diag = torch.ones(n2, d, dtype=x1.dtype) / self.lengthscale.pow(2)
        grad_diag = grad_diag.transpose(-1, -2).contiguous().view(n2 * d)
        k_diag = torch.cat((kernel_diag, grad_diag), dim=-1)
        pi = torch.arange(n2 * (d + 1)).view(d + 1, n2).t().reshape(-1)
        return k_diag[pi]


class ScaleKernel(nn.Module):
    def __init__(self, base_kernel):
        super().__init__()
        self.base_kernel = base_kernel
        self.raw_outputscale = nn.Parameter(torch.zeros(()))

    @property
    def outputscale(self):
        return nn.functional.softplus(self.raw_outputscale)

    def forward(self, x1, x2=None, diag=False):
        return self.outputscale * self.base_kernel(x1, x2, diag=diag)


class SparseGradGP(nn.Module):
    def __init__(self, cfg, inducing_points):
        super().__init__()
        self.cfg = cfg
        self.covar_module = ScaleKernel(RBFKernelGrad())
        self.inducing_points = nn.Parameter(inducing_points.clone())
        self.raw_noise = nn.Parameter(torch.tensor(math.log(math.expm1(cfg.noise_init))))
        self.mean_constant = nn.Parameter(torch.zeros(()))

    @property
    def noise(self):
        return nn.functional.softplus(self.raw_noise) + 1e-4

    def _cross_terms(self, x):
        z = self.inducing_points
        m = z.shape[0] * (z.shape[1] + 1)
        Kuu = self.covar_module(z) + self.cfg.jitter * torch.eye(m)
        Kuf = self.covar_module(z, x)
        L = torch.linalg.cholesky(Kuu)
        V = torch.linalg.solve_triangular(L, Kuf, upper=False)
        return V

    def marginal_log_likelihood(self, x, y_joint):
        V = self._cross_terms(x)
        n = y_joint.shape[0]
        qff_diag = V.pow(2).sum(0)
        if self.cfg.approximation == "fitc":
            kff_diag = self.covar_module(x, diag=True)
            lam = (kff_diag - qff_diag).clamp_min(0) + self.noise
        else:
            lam = torch.full((n,), 1.0) * self.noise
        r = y_joint - self.mean_constant * (torch.arange(n) % (x.shape[1] + 1) == 0).float()
        A = torch.eye(V.shape[0]) + (V / lam) @ V.t()
        LA = torch.linalg.cholesky(A)
        c = torch.linalg.solve_triangular(LA, (V / lam) @ r.unsqueeze(-1), upper=False).squeeze(-1)
        quad = (r.pow(2) / lam).sum() - c.pow(2).sum()
        logdet = lam.log().sum() + 2 * torch.diagonal(LA).log().sum()
        return -0.5 * (quad + logdet + n * math.log(2 * math.pi)) / n

    @torch.no_grad()
    def predict_mean(self, x_train, y_train, x_test):
        V = self._cross_terms(x_train)
        lam = torch.full((y_train.shape[0],), 1.0) * self.noise
        A = torch.eye(V.shape[0]) + (V / lam) @ V.t()
        z = self.inducing_points
        m = z.shape[0] * (z.shape[1] + 1)
        L = torch.linalg.cholesky(self.covar_module(z) + self.cfg.jitter * torch.eye(m))
        Vs = torch.linalg.solve_triangular(L, self.covar_module(z, x_test), upper=False)
        alpha = torch.linalg.solve(A, (V / lam) @ y_train)
        return Vs.t() @ alpha


def branin_like(x):
    f = torch.sin(3 * x[:, 0]) + 0.5 * x[:, 1].pow(2)
    g = torch.stack([3 * torch.cos(3 * x[:, 0]), x[:, 1]], dim=-1)
    return torch.cat([f.unsqueeze(-1), g], dim=-1).reshape(-1)


class EarlyStopping:
    def __init__(self, patience):
        self.patience, self.best, self.bad = patience, float("inf"), 0

    def __call__(self, value):
        if value < self.best - 1e-6:
            self.best, self.bad = value, 0
        else:
            self.bad += 1
        return self.bad >= self.patience


class Trainer:
    def __init__(self, cfg):
        self.cfg = cfg
        g = torch.Generator().manual_seed(cfg.seed)
        self.x = torch.rand(cfg.n_train, cfg.dim, generator=g) * 2 - 1
        self.y = branin_like(self.x) + 0.01 * torch.randn(cfg.n_train * (cfg.dim + 1), generator=g)
        self.x_test = torch.rand(cfg.n_test, cfg.dim, generator=g) * 2 - 1
        self.y_test = branin_like(self.x_test)
        self.model = SparseGradGP(cfg, self.x[: cfg.n_inducing])
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.lr)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, cfg.step_size, cfg.gamma)
        self.stopper = EarlyStopping(cfg.patience)
        self.history = []

    def train_step(self):
        self.model.train()
        self.optimizer.zero_grad()
        loss = -self.model.marginal_log_likelihood(self.x, self.y)
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        return loss.item()

    def evaluate(self):
        self.model.eval()
        pred = self.model.predict_mean(self.x, self.y, self.x_test)
        return (pred - self.y_test).pow(2).mean().sqrt().item()

    def fit(self):
        for step in range(self.cfg.steps):
            loss = self.train_step()
            rmse = self.evaluate()
            self.history.append((step, loss, rmse))
            print(f"step {step} nmll {loss:.4f} rmse {rmse:.4f}")
            if self.stopper(loss):
                break
        return self.history


def main():
    cfg = GPConfig()
    torch.manual_seed(cfg.seed)
    trainer = Trainer(cfg)
    trainer.fit()
    ls = trainer.model.covar_module.base_kernel.lengthscale.item()
    print(f"lengthscale {ls:.3f} outputscale {trainer.model.covar_module.outputscale.item():.3f}")


if __name__ == "__main__":
    main()
