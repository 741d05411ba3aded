# expect: clean
# source: https://github.com/yandexdataschool/Practical_DL/pull/75
"""Bayesian neural network trained with Bayes-by-backprop (Practical_DL seminar layout).

A fully factorised Gaussian posterior over the weights of every BayesLinear layer,
sampled with the reparameterisation trick through a shared gaussian_sampler helper,
an analytic KL to a N(0, prior_sigma^2) prior, an ELBO objective with KL annealing, a
Trainer with Adam + ExponentialLR, Monte-Carlo predictive evaluation (mean, std, NLL,
coverage) and a small callback list.  Synthetic heteroscedastic regression data, CPU only.
"""
import math
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CFG = SimpleNamespace(
    in_features=3, hidden=32, n_train=128, n_val=64, batch_size=32,
    prior_sigma=1.0, init_logsigma=-5.0, lr=3e-3, gamma=0.95,
    epochs=2, kl_anneal_epochs=2, mc_samples=8, seed=0,
)


def gaussian_sampler(mu, logsigma):
    noise = torch.randn_like(mu)
    return noise.mul(logsigma.exp()).add(mu)


def gaussian_kl(mu, logsigma, prior_sigma):
    sigma2 = torch.exp(2 * logsigma)
    return (math.log(prior_sigma) - logsigma + (sigma2 + mu.pow(2)) / (2 * prior_sigma ** 2) - 0.5).sum()


class BayesLinear(nn.Module):
    def __init__(self, in_features, out_features, cfg):
        super().__init__()
        self.cfg = cfg
        self.mu = nn.Parameter(torch.empty(out_features, in_features))
        self.logsigma = nn.Parameter(torch.full((out_features, in_features), cfg.init_logsigma))
        self.bias_mu = nn.Parameter(torch.zeros(out_features))
        self.bias_logsigma = nn.Parameter(torch.full((out_features,), cfg.init_logsigma))
        nn.init.kaiming_uniform_(self.mu, a=math.sqrt(5))
        self.sample = True

    def forward(self, x):
        if self.training or self.sample:
            weight = gaussian_sampler(self.mu, self.logsigma)
            bias = gaussian_sampler(self.bias_mu, self.bias_logsigma)
        else:
            weight, bias = self.mu, self.bias_mu
        return F.linear(x, weight, bias)

    def kl(self):
        p = self.cfg.prior_sigma
        return gaussian_kl(self.mu, self.logsigma, p) + gaussian_kl(self.bias_mu, self.bias_logsigma, p)


class BayesMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.l1 = BayesLinear(cfg.in_features, cfg.hidden, cfg)
        self.l2 = BayesLinear(cfg.hidden, cfg.hidden, cfg)
        self.head = BayesLinear(cfg.hidden, 2, cfg)

    def forward(self, x):
        h = F.relu(self.l1(x))
        h = F.relu(self.l2(h))
        out = self.head(h)
        mean, raw_std = out.unbind(-1)
        return mean, F.softplus(raw_std) + 1e-3

    def kl(self):
        return sum(m.kl() for m in self.modules() if isinstance(m, BayesLinear))


def make_data(cfg, n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, cfg.in_features, generator=g)
    noise = 0.1 + 0.3 * x[:, 0].abs()
    y = torch.sin(x[:, 0]) + 0.5 * x[:, 1] - 0.2 * x[:, 2] ** 2 + noise * torch.randn(n, generator=g)
    return x, y


class PrintCallback:
    def on_epoch_end(self, trainer, logs):
        print(" ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in logs.items()))


class Trainer:
    def __init__(self, model, cfg, callbacks=()):
        self.model, self.cfg, self.callbacks = model, cfg, list(callbacks)
        self.optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
        self.scheduler = torch.optim.lr_scheduler.ExponentialLR(self.optimizer, gamma=cfg.gamma)
        self.epoch = 0

    @property
    def kl_weight(self):
        return min(1.0, (self.epoch + 1) / self.cfg.kl_anneal_epochs)

    def train_step(self, xb, yb, n_total):
        self.model.train()
        self.optimizer.zero_grad()
        mean, std = self.model(xb)
        nll = -torch.distributions.Normal(mean, std).log_prob(yb).mean()
        elbo_loss = nll + self.kl_weight * self.model.kl() / n_total
        elbo_loss.backward()
        self.optimizer.step()
        return elbo_loss.item()

    @torch.no_grad()
    def evaluate(self, x, y):
        self.model.eval()
        means, stds = [], []
        for _ in range(self.cfg.mc_samples):
            m, s = self.model(x)
            means.append(m)
            stds.append(s)
        means, stds = torch.stack(means), torch.stack(stds)
        pred_mean = means.mean(0)
        pred_std = (stds.pow(2).mean(0) + means.var(0)).sqrt()
        nll = -torch.distributions.Normal(pred_mean, pred_std).log_prob(y).mean().item()
        lo, hi = pred_mean - 1.96 * pred_std, pred_mean + 1.96 * pred_std
        coverage = float(np.mean(((y >= lo) & (y <= hi)).numpy()))
        rmse = (pred_mean - y).pow(2).mean().sqrt().item()
        return {"val_nll": nll, "val_rmse": rmse, "coverage": coverage}

    def fit(self, x, y, x_val, y_val):
        n = x.shape[0]
        for self.epoch in range(self.cfg.epochs):
            perm = torch.randperm(n)
            losses = []
            for i in range(0, n, self.cfg.batch_size):
                idx = perm[i:i + self.cfg.batch_size]
                losses.append(self.train_step(x[idx], y[idx], n))
            self.scheduler.step()
            logs = {"epoch": self.epoch, "loss": float(np.mean(losses)), **self.evaluate(x_val, y_val)}
            for cb in self.callbacks:
                cb.on_epoch_end(self, logs)


def main():
    torch.manual_seed(CFG.seed)
    x, y = make_data(CFG, CFG.n_train, 0)
    x_val, y_val = make_data(CFG, CFG.n_val, 1)
    model = BayesMLP(CFG)
    Trainer(model, CFG, callbacks=[PrintCallback()]).fit(x, y, x_val, y_val)


if __name__ == "__main__":
    main()
