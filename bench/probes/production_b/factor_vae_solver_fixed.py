# expect: clean
# source: https://github.com/1Konny/FactorVAE/issues/15
"""FactorVAE: a VAE with a total-correlation penalty estimated by a
discriminator that tells q(z) apart from the product of its marginals.

The solver alternates a VAE update and a discriminator update on two
independent mini-batches, as in Kim & Mnih (2018).
"""
import argparse
import logging
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

logger = logging.getLogger("factorvae")
logging.basicConfig(level=logging.INFO, format="%(message)s")


def get_args(argv=None):
    p = argparse.ArgumentParser(description="FactorVAE")
    p.add_argument("--z_dim", type=int, default=6)
    p.add_argument("--x_dim", type=int, default=64)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--gamma", type=float, default=6.4)
    p.add_argument("--lr_VAE", type=float, default=1e-4)
    p.add_argument("--beta1_VAE", type=float, default=0.9)
    p.add_argument("--beta2_VAE", type=float, default=0.999)
    p.add_argument("--lr_D", type=float, default=1e-4)
    p.add_argument("--beta1_D", type=float, default=0.5)
    p.add_argument("--beta2_D", type=float, default=0.9)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--max_iter", type=int, default=6)
    p.add_argument("--print_iter", type=int, default=2)
    return p.parse_args(argv if argv is not None else [])


def recon_loss(x, x_recon):
    return F.binary_cross_entropy_with_logits(x_recon, x, reduction="sum").div(x.size(0))


def kl_divergence(mu, logvar):
    return 0.5 * (-1 - logvar + mu.pow(2) + logvar.exp()).sum(1).mean()


def permute_dims(z):
    assert z.dim() == 2
    B, _ = z.size()
    perm_z = []
    for z_j in z.split(1, 1):
        perm = torch.randperm(B)
        perm_z.append(z_j[perm])
    return torch.cat(perm_z, 1)


def kaiming_init(m):
    if isinstance(m, nn.Linear):
        nn.init.kaiming_normal_(m.weight)
        if m.bias is not None:
            m.bias.data.fill_(0)


class Discriminator(nn.Module):
    def __init__(self, z_dim, width=256, depth=4):
        super().__init__()
        layers, d = [], z_dim
        for _ in range(depth):
            layers += [nn.Linear(d, width), nn.LeakyReLU(0.2, True)]
            d = width
        layers.append(nn.Linear(d, 2))
        self.net = nn.Sequential(*layers)
        self.apply(kaiming_init)

    def forward(self, z):
        return self.net(z).squeeze()


class FactorVAE(nn.Module):
    def __init__(self, x_dim, hidden, z_dim):
        super().__init__()
        self.z_dim = z_dim
        self.encode = nn.Sequential(
            nn.Linear(x_dim, hidden), nn.ReLU(True),
            nn.Linear(hidden, hidden), nn.ReLU(True),
            nn.Linear(hidden, 2 * z_dim))
        self.decode = nn.Sequential(
            nn.Linear(z_dim, hidden), nn.ReLU(True),
            nn.Linear(hidden, hidden), nn.ReLU(True),
            nn.Linear(hidden, x_dim))
        self.apply(kaiming_init)

    @staticmethod
    def reparametrize(mu, logvar):
        std = logvar.mul(0.5).exp_()
        eps = std.data.new(std.size()).normal_()
        return eps.mul(std).add_(mu)

    def forward(self, x, no_dec=False):
        stats = self.encode(x)
        mu, logvar = stats[:, : self.z_dim], stats[:, self.z_dim:]
        z = self.reparametrize(mu, logvar)
        if no_dec:
            return z.squeeze()
        x_recon = self.decode(z)
        return x_recon, mu, logvar, z.squeeze()


class SyntheticFactors:
    """Binary images generated from a few independent latent factors."""

    def __init__(self, x_dim, n_factors=4, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.basis = torch.randn(n_factors, x_dim, generator=g)
        self.g = g

    def sample(self, n):
        f = torch.rand(n, self.basis.size(0), generator=self.g) * 2 - 1
        return torch.sigmoid(3 * f @ self.basis)

    def pairs(self, n, steps):
        for _ in range(steps):
            yield self.sample(n), self.sample(n)


class Solver:
    def __init__(self, args):
        self.args = args
        self.global_iter = 0
        self.VAE = FactorVAE(args.x_dim, args.hidden, args.z_dim)
        self.D = Discriminator(args.z_dim)
        self.optim_VAE = torch.optim.Adam(self.VAE.parameters(), lr=args.lr_VAE,
                                          betas=(args.beta1_VAE, args.beta2_VAE))
        self.optim_D = torch.optim.Adam(self.D.parameters(), lr=args.lr_D,
                                        betas=(args.beta1_D, args.beta2_D))
        self.data = SyntheticFactors(args.x_dim)

    def net_mode(self, train):
        for net in (self.VAE, self.D):
            net.train(train)

    def train(self):
        self.net_mode(train=True)
        ones = torch.ones(self.args.batch_size, dtype=torch.long)
        zeros = torch.zeros(self.args.batch_size, dtype=torch.long)
        t0 = time.time()
        for x_true1, x_true2 in self.data.pairs(self.args.batch_size, self.args.max_iter):
            self.global_iter += 1

            x_recon, mu, logvar, z = self.VAE(x_true1)
            vae_recon_loss = recon_loss(x_true1, x_recon)
            vae_kld = kl_divergence(mu, logvar)
            D_z = self.D(z)
            vae_tc_loss = (D_z[:, :1] - D_z[:, 1:]).mean()
            vae_loss = vae_recon_loss + vae_kld + self.args.gamma * vae_tc_loss

            self.optim_VAE.zero_grad()
            vae_loss.backward(retain_graph=True)
            self.optim_VAE.step()

            z_prime = self.VAE(x_true2, no_dec=True)
            z_pperm = permute_dims(z_prime).detach()
            D_z_pperm = self.D(z_pperm)
            D_tc_loss = 0.5 * (F.cross_entropy(D_z.detach(), zeros) + F.cross_entropy(D_z_pperm, ones))

            self.optim_D.zero_grad()
            D_tc_loss.backward()
            self.optim_D.step()

            if self.global_iter % self.args.print_iter == 0:
                soft_D_z = F.softmax(D_z, 1)[:, :1].detach()
                D_acc = ((soft_D_z >= 0.5).sum() + (F.softmax(D_z_pperm, 1)[:, :1] < 0.5).sum()).float()
                D_acc /= 2 * self.args.batch_size
                logger.info("[%d] vae_recon %.3f vae_kld %.3f vae_tc %.3f D_tc %.3f D_acc %.3f (%.2fs)",
                            self.global_iter, vae_recon_loss.item(), vae_kld.item(), vae_tc_loss.item(),
                            D_tc_loss.item(), D_acc.item(), time.time() - t0)
        return self.global_iter


if __name__ == "__main__":
    torch.manual_seed(0)
    solver = Solver(get_args())
    solver.train()
    logger.info("finished after %d iterations", solver.global_iter)
