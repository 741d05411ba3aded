# expect: clean
# source: https://github.com/GuHY777/SS-VAE-pytorch/issues/1
"""CEVAE-style causal effect variational autoencoder for individual treatment effects.

A latent confounder z is inferred from covariates x, treatment t and outcome y
(q(t|x), q(y|x,t), q(z|x,t,y)); the generative side models p(x|z), p(t|z)
and p(y|t,z).  The ELBO uses Monte-Carlo estimates of log q(z|.) - log p(z),
plus auxiliary losses for the treatment/outcome predictors.  After training
the ITE and ATE are estimated and scored (PEHE, ATE error) against the known
potential outcomes of a seeded IHDP-like synthetic data set.
"""
import argparse
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def log_Gaussian_pro(x, mu, var):
    """Element-wise log density of N(mu, var), summed over the last axis."""
    return torch.sum(-0.5 * torch.log(2 * np.pi * var) - (x - mu) ** 2 / (2 * var), dim=-1)


def log_standard_Gaussian(x):
    return torch.sum(-0.5 * math.log(2 * math.pi) - x ** 2 / 2, dim=-1)


class FullyConnected(nn.Sequential):
    def __init__(self, sizes, final_activation=None):
        layers = []
        for in_size, out_size in zip(sizes, sizes[1:]):
            layers += [nn.Linear(in_size, out_size), nn.ELU()]
        layers.pop(-1)
        if final_activation is not None:
            layers.append(final_activation)
        super().__init__(*layers)


class DiagNormalNet(nn.Module):
    def __init__(self, sizes):
        super().__init__()
        self.fc = FullyConnected(sizes[:-1] + [2 * sizes[-1]])

    def forward(self, x):
        loc, scale = self.fc(x).chunk(2, dim=-1)
        return loc, F.softplus(scale) + 1e-3


class BernoulliNet(nn.Module):
    def __init__(self, sizes):
        super().__init__()
        self.fc = FullyConnected(sizes + [1])

    def forward(self, x):
        return self.fc(x).squeeze(-1)


class Guide(nn.Module):
    def __init__(self, config):
        super().__init__()
        d, h, z = config.feature_dim, config.hidden_dim, config.latent_dim
        self.t_nn = BernoulliNet([d])
        self.y_nn = FullyConnected([d, h, h])
        self.y0_nn = DiagNormalNet([h, 1])
        self.y1_nn = DiagNormalNet([h, 1])
        self.z0_nn = DiagNormalNet([1 + d, h, z])
        self.z1_nn = DiagNormalNet([1 + d, h, z])

    def y_mean(self, x, t):
        hidden = self.y_nn(x)
        return torch.where(t.bool().unsqueeze(-1), self.y1_nn(hidden)[0], self.y0_nn(hidden)[0]).squeeze(-1)

    def forward(self, x, t, y):
        t_logits = self.t_nn(x)
        hidden = self.y_nn(x)
        y_loc0, y_scale0 = self.y0_nn(hidden)
        y_loc1, y_scale1 = self.y1_nn(hidden)
        xy = torch.cat([y.unsqueeze(-1), x], -1)
        z_mu0, z_var0 = self.z0_nn(xy)
        z_mu1, z_var1 = self.z1_nn(xy)
        tt = t.unsqueeze(-1)
        z_mu = tt * z_mu1 + (1 - tt) * z_mu0
        z_var = tt * z_var1 + (1 - tt) * z_var0
        y_loc = torch.where(tt.bool(), y_loc1, y_loc0).squeeze(-1)
        y_var = torch.where(tt.bool(), y_scale1, y_scale0).squeeze(-1)
        return t_logits, (y_loc, y_var), (z_mu, z_var)


class Model(nn.Module):
    def __init__(self, config):
        super().__init__()
        d, h, z = config.feature_dim, config.hidden_dim, config.latent_dim
        self.x_nn = DiagNormalNet([z, h, d])
        self.t_nn = BernoulliNet([z])
        self.y0_nn = DiagNormalNet([z, h, 1])
        self.y1_nn = DiagNormalNet([z, h, 1])

    def y_mean(self, z, t):
        loc = torch.where(t.bool().unsqueeze(-1), self.y1_nn(z)[0], self.y0_nn(z)[0])
        return loc.squeeze(-1)


class CEVAE(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.model = Model(config)
        self.guide = Guide(config)

    def elbo(self, x, t, y):
        t_logits_q, (y_loc_q, y_var_q), (z_mu, z_var) = self.guide(x, t, y)
        z = z_mu + torch.randn_like(z_mu) * torch.sqrt(z_var)
        log_q_z = log_Gaussian_pro(z, z_mu, z_var)
        log_p_z = log_standard_Gaussian(z)
        x_mu, x_var = self.model.x_nn(z)
        log_p_x = log_Gaussian_pro(x, x_mu, x_var)
        log_p_t = -F.binary_cross_entropy_with_logits(self.model.t_nn(z), t, reduction='none')
        y_loc = self.model.y_mean(z, t)
        log_p_y = -0.5 * (y - y_loc) ** 2
        elbo = log_p_x + log_p_t + log_p_y + log_p_z - log_q_z
        aux = (-F.binary_cross_entropy_with_logits(t_logits_q, t, reduction='none')
               - 0.5 * (y - y_loc_q) ** 2 / y_var_q - 0.5 * torch.log(y_var_q))
        return -(elbo + aux).mean()

    @torch.no_grad()
    def ite(self, x, num_samples=20):
        t_probs = torch.sigmoid(self.guide.t_nn(x))
        ites = []
        for _ in range(num_samples):
            t = torch.bernoulli(t_probs)
            y = self.guide.y_mean(x, t)
            _, _, (z_mu, z_var) = self.guide(x, t, y)
            z = z_mu + torch.randn_like(z_mu) * torch.sqrt(z_var)
            ones, zeros = torch.ones_like(t), torch.zeros_like(t)
            ites.append(self.model.y_mean(z, ones) - self.model.y_mean(z, zeros))
        return torch.stack(ites).mean(0)


def ihdp_like(n, d, seed):
    rng = np.random.RandomState(seed)
    z = rng.randn(n, 2)
    x = np.concatenate([z @ rng.randn(2, d) + 0.3 * rng.randn(n, d)], 1).astype(np.float32)
    t = (rng.rand(n) < 1 / (1 + np.exp(-z[:, 0]))).astype(np.float32)
    mu0 = z[:, 1] + 0.5 * z[:, 0]
    mu1 = mu0 + 1.0 + 0.5 * z[:, 1]
    y = np.where(t > 0, mu1, mu0) + 0.1 * rng.randn(n)
    return [torch.from_numpy(a.astype(np.float32)) for a in (x, t, y, mu0, mu1)]


class Trainer:
    def __init__(self, cevae, config):
        self.cevae = cevae
        self.config = config
        self.optimizer = torch.optim.Adam(cevae.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.ExponentialLR(self.optimizer, gamma=config.lr_decay)

    def train_step(self, x, t, y):
        self.optimizer.zero_grad()
        loss = self.cevae.elbo(x, t, y)
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def evaluate(self, x, mu0, mu1):
        ite_hat = self.cevae.ite(x)
        pehe = torch.sqrt(((ite_hat - (mu1 - mu0)) ** 2).mean()).item()
        ate_err = abs(ite_hat.mean().item() - (mu1 - mu0).mean().item())
        return pehe, ate_err

    def fit(self, data):
        x, t, y, mu0, mu1 = data
        for epoch in range(self.config.num_epochs):
            perm = torch.randperm(x.size(0))
            losses = [self.train_step(x[idx], t[idx], y[idx]) for idx in perm.split(self.config.batch_size)]
            self.scheduler.step()
            pehe, ate_err = self.evaluate(x, mu0, mu1)
            print('epoch %d loss %.3f PEHE %.3f ATE-err %.3f' % (epoch, np.mean(losses), pehe, ate_err))


def main():
    parser = argparse.ArgumentParser(description="Causal Effect Variational Autoencoder")
    parser.add_argument("--num-data", default=256, type=int)
    parser.add_argument("--feature-dim", default=6, type=int)
    parser.add_argument("--latent-dim", default=4, type=int)
    parser.add_argument("--hidden-dim", default=32, type=int)
    parser.add_argument("--num-epochs", default=3, type=int)
    parser.add_argument("--batch-size", default=64, type=int)
    parser.add_argument("--learning-rate", default=1e-3, type=float)
    parser.add_argument("--lr-decay", default=0.9, type=float)
    parser.add_argument("--weight-decay", default=1e-4, type=float)
    parser.add_argument("--seed", default=0, type=int)
    config = parser.parse_args([])
    torch.manual_seed(config.seed)
    data = ihdp_like(config.num_data, config.feature_dim, config.seed)
    Trainer(CEVAE(config), config).fit(data)


if __name__ == "__main__":
    main()
