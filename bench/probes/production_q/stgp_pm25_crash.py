# expect: freed_graph
# source: https://github.com/IceLab-X/MiniGP/issues/13
"""Spatio-temporal Gaussian process (STGP) for hourly PM2.5 readings.

Monitoring stations (2-D coordinates) x hours form a grid, so the covariance
is a Kronecker product of a spatial and a temporal squared-exponential kernel.
The negative log marginal likelihood is evaluated with per-factor eigen
decompositions; hyperparameters are fitted with Adam and the model forecasts
the last hours of the day, scored by an evaluation callback.
"""
import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn as nn

JITTER = 1e-6
torch.set_default_dtype(torch.float64)


@dataclass
class STGPConfig:
    n_stations: int = 25
    n_hours: int = 24
    n_forecast: int = 6
    noise_std: float = 0.3
    lr: float = 0.05
    epochs: int = 60
    lr_step: int = 30
    lr_gamma: float = 0.5
    eval_every: int = 10
    seed: int = 1
    kernel_init: dict = field(default_factory=lambda: {"space": (0.8, 1.0), "time": (4.0, 1.0)})


def kronecker(A, B):
    """Kronecker product of two matrices."""
    return (A[:, None, :, None] * B[None, :, None, :]).reshape(A.size(0) * B.size(0), A.size(1) * B.size(1))


class SE_kernel(nn.Module):
    """Squared exponential kernel with a shared length scale."""

    def __init__(self, length_scale=1.0, signal_variance=1.0):
        super().__init__()
        self.length_scale = torch.exp(nn.Parameter(torch.log(torch.tensor(length_scale))))
        self.signal_variance = torch.exp(nn.Parameter(torch.log(torch.tensor(signal_variance))))

    def forward(self, X1, X2):
        X1 = X1 / self.length_scale
        X2 = X2 / self.length_scale
        sqdist = (X1 ** 2).sum(1, keepdim=True) + (X2 ** 2).sum(1) - 2.0 * X1 @ X2.t()
        return self.signal_variance * torch.exp(-0.5 * sqdist.clamp_min(0.0))

    def extra_repr(self):
        return f"length_scale={self.length_scale.item():.3f}, variance={self.signal_variance.item():.3f}"


class DataNormalizer:
    """Standardises the targets and remembers the statistics for predictions."""

    def __init__(self, Y):
        self.mean = Y.mean()
        self.std = Y.std()

    def normalize(self, Y):
        return (Y - self.mean) / self.std

    def denormalize(self, Y, var=None):
        if var is None:
            return Y * self.std + self.mean
        return Y * self.std + self.mean, var * self.std ** 2


class stgp(nn.Module):
    def __init__(self, S, T, Y, cfg: STGPConfig):
        super().__init__()
        self.S, self.T = S, T
        self.normalizer = DataNormalizer(Y)
        self.Y = self.normalizer.normalize(Y)
        self.kernel_s = SE_kernel(*cfg.kernel_init["space"])
        self.kernel_t = SE_kernel(*cfg.kernel_init["time"])
        self.log_beta = nn.Parameter(torch.tensor(math.log(1.0 / cfg.noise_std ** 2)))
        self._eig_cache = None

    @property
    def noise_variance(self):
        return torch.exp(-self.log_beta)

    def _decompose(self):
        Ks = self.kernel_s(self.S, self.S) + JITTER * torch.eye(self.S.size(0))
        Kt = self.kernel_t(self.T, self.T) + JITTER * torch.eye(self.T.size(0))
        ls, Qs = torch.linalg.eigh(Ks)
        lt, Qt = torch.linalg.eigh(Kt)
        lam = kronecker(ls.unsqueeze(1), lt.unsqueeze(1)).squeeze(1).clamp_min(0.0) + self.noise_variance
        return Qs, Qt, lam

    def negative_log_likelihood(self):
        Qs, Qt, lam = self._decompose()
        n = lam.numel()
        rotated = (Qs.t() @ self.Y @ Qt).reshape(-1)
        quad = (rotated ** 2 / lam).sum()
        nll = 0.5 * quad + 0.5 * torch.log(lam).sum() + 0.5 * n * math.log(2 * math.pi)
        return nll / n

    def fit_cache(self):
        with torch.no_grad():
            Qs, Qt, lam = self._decompose()
            alpha = (Qs.t() @ self.Y @ Qt) / lam.reshape(self.Y.shape)
            self._eig_cache = Qs @ alpha @ Qt.t()

    def forward(self, S_star, T_star):
        if self._eig_cache is None:
            self.fit_cache()
        with torch.no_grad():
            Ks_star = self.kernel_s(S_star, self.S)
            Kt_star = self.kernel_t(T_star, self.T)
            mean = Ks_star @ self._eig_cache @ Kt_star.t()
            var = (self.kernel_s.signal_variance * self.kernel_t.signal_variance
                   + self.noise_variance) * torch.ones_like(mean)
        return self.normalizer.denormalize(mean, var)


class EvalCallback:
    def __init__(self, S_test, T_test, Y_test, every):
        self.S_test, self.T_test, self.Y_test, self.every = S_test, T_test, Y_test, every
        self.history = []

    def __call__(self, trainer, epoch, loss):
        if (epoch + 1) % self.every:
            return
        metrics = trainer.evaluate(self.S_test, self.T_test, self.Y_test)
        self.history.append((epoch, loss, metrics["rmse"]))
        print(f"epoch {epoch + 1:3d}  nll {loss:.4f}  rmse {metrics['rmse']:.4f}  nlpd {metrics['nlpd']:.4f}")


class STGPTrainer:
    def __init__(self, model, cfg, callbacks=()):
        self.model = model
        self.cfg = cfg
        self.optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, cfg.lr_step, cfg.lr_gamma)
        self.callbacks = list(callbacks)

    def train_step(self):
        self.model._eig_cache = None
        self.optimizer.zero_grad()
        loss = self.model.negative_log_likelihood()
        loss.backward()  # raises
        self.optimizer.step()
        self.scheduler.step()
        return loss.item()

    def evaluate(self, S_test, T_test, Y_test):
        mean, var = self.model(S_test, T_test)
        rmse = torch.sqrt(((mean - Y_test) ** 2).mean()).item()
        nlpd = (0.5 * torch.log(2 * math.pi * var) + 0.5 * (Y_test - mean) ** 2 / var).mean().item()
        return {"rmse": rmse, "nlpd": nlpd}

    def fit(self):
        for epoch in range(self.cfg.epochs):
            loss = self.train_step()
            for cb in self.callbacks:
                cb(self, epoch, loss)
        return self.model


def make_pm25_grid(cfg):
    """Synthetic PM2.5 field: a diurnal cycle modulated by a smooth spatial plume."""
    rng = np.random.default_rng(cfg.seed)
    S = rng.uniform(0.0, 3.0, size=(cfg.n_stations, 2))
    T = np.arange(cfg.n_hours, dtype=float)[:, None]
    plume = 35.0 + 15.0 * np.exp(-((S[:, 0] - 1.5) ** 2 + (S[:, 1] - 1.0) ** 2))
    diurnal = 1.0 + 0.4 * np.sin(2 * np.pi * (T[:, 0] - 7.0) / 24.0)
    Y = plume[:, None] * diurnal[None, :] + rng.normal(0.0, 2.0, size=(cfg.n_stations, cfg.n_hours))
    return torch.from_numpy(S), torch.from_numpy(T), torch.from_numpy(Y)


def train_stgp(cfg):
    S, T, Y = make_pm25_grid(cfg)
    split = cfg.n_hours - cfg.n_forecast
    model = stgp(S, T[:split], Y[:, :split], cfg)
    callback = EvalCallback(S, T[split:], Y[:, split:], cfg.eval_every)
    trainer = STGPTrainer(model, cfg, callbacks=[callback])
    trainer.fit()
    print(model.kernel_s, model.kernel_t, sep="\n")
    return model, callback.history


def main():
    cfg = STGPConfig()
    torch.manual_seed(cfg.seed)
    model, history = train_stgp(cfg)
    print("final rmse:", history[-1][2])


if __name__ == "__main__":
    main()
