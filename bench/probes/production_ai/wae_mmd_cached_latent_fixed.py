# expect: clean
# source: https://github.com/schelotto/Wasserstein-AutoEncoders/issues/2
"""Wasserstein auto-encoder with an MMD penalty (WAE-MMD), schelotto-style.

Keeps the structure of wae_mmd.py: an argparse config, a conv Encoder and a
transposed-conv Decoder, the inverse-multiquadratics MMD kernel summed over scales,
free_params/frozen_params helpers, separate Adam optimizers and StepLR schedulers for
encoder and decoder, reconstruction then MMD loss per step, and an evaluation pass that
reports reconstruction error and MMD on held-out data.  Latent codes of the current batch
are cached by the runner so the MMD term reuses them.  Synthetic 16x16 images, CPU only.
"""
import argparse

import torch
import torch.nn as nn
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR


def get_args(argv=None):
    parser = argparse.ArgumentParser(description="PyTorch WAE-MMD")
    parser.add_argument("-batch_size", type=int, default=8)
    parser.add_argument("-epochs", type=int, default=2)
    parser.add_argument("-n_batches", type=int, default=3)
    parser.add_argument("-lr", type=float, default=1e-4)
    parser.add_argument("-dim_h", type=int, default=8)
    parser.add_argument("-n_z", type=int, default=4)
    parser.add_argument("-LAMBDA", type=float, default=10)
    parser.add_argument("-n_channel", type=int, default=1)
    parser.add_argument("-sigma", type=float, default=1)
    parser.add_argument("-seed", type=int, default=123)
    return parser.parse_args(argv if argv is not None else [])


def free_params(module: nn.Module):
    for p in module.parameters():
        p.requires_grad = True


def frozen_params(module: nn.Module):
    for p in module.parameters():
        p.requires_grad = False


class Encoder(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.n_channel, self.dim_h, self.n_z = args.n_channel, args.dim_h, args.n_z
        self.main = nn.Sequential(
            nn.Conv2d(self.n_channel, self.dim_h, 4, 2, 1, bias=False),
            nn.ReLU(True),
            nn.Conv2d(self.dim_h, self.dim_h * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(self.dim_h * 2),
            nn.ReLU(True),
            nn.Conv2d(self.dim_h * 2, self.dim_h * 4, 4, 2, 1, bias=False),
            nn.BatchNorm2d(self.dim_h * 4),
            nn.ReLU(True),
        )
        self.fc = nn.Linear(self.dim_h * 4 * 2 * 2, self.n_z)

    def forward(self, x):
        x = self.main(x)
        return self.fc(x.flatten(1))


class Decoder(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.dim_h, self.n_z = args.dim_h, args.n_z
        self.proj = nn.Sequential(nn.Linear(self.n_z, self.dim_h * 4 * 4 * 4), nn.ReLU())
        self.main = nn.Sequential(
            nn.ConvTranspose2d(self.dim_h * 4, self.dim_h * 2, 4, 2, 1),
            nn.BatchNorm2d(self.dim_h * 2),
            nn.ReLU(True),
            nn.ConvTranspose2d(self.dim_h * 2, args.n_channel, 4, 2, 1),
            nn.Sigmoid(),
        )

    def forward(self, x):
        x = self.proj(x).view(-1, self.dim_h * 4, 4, 4)
        return self.main(x)


def imq_kernel(X: torch.Tensor, Y: torch.Tensor, h_dim: int):
    batch_size = X.size(0)
    norms_x = X.pow(2).sum(1, keepdim=True)
    prods_x = torch.mm(X, X.t())
    dists_x = norms_x + norms_x.t() - 2 * prods_x
    norms_y = Y.pow(2).sum(1, keepdim=True)
    prods_y = torch.mm(Y, Y.t())
    dists_y = norms_y + norms_y.t() - 2 * prods_y
    dot_prd = torch.mm(X, Y.t())
    dists_c = norms_x + norms_y.t() - 2 * dot_prd
    stats = 0
    for scale in [0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0]:
        C = 2 * h_dim * 1.0 * scale
        res1 = C / (C + dists_x)
        res1 = res1 + C / (C + dists_y)
        res1 = (1 - torch.eye(batch_size)) * res1
        res1 = res1.sum() / (batch_size - 1)
        res2 = C / (C + dists_c)
        res2 = res2.sum() * 2.0 / batch_size
        stats = stats + res1 - res2
    return stats


class WAERunner:
    def __init__(self, args):
        self.args = args
        self.encoder, self.decoder = Encoder(args), Decoder(args)
        self.criterion = nn.MSELoss()
        self.enc_optim = optim.Adam(self.encoder.parameters(), lr=args.lr)
        self.dec_optim = optim.Adam(self.decoder.parameters(), lr=args.lr)
        self.enc_scheduler = StepLR(self.enc_optim, step_size=30, gamma=0.5)
        self.dec_scheduler = StepLR(self.dec_optim, step_size=30, gamma=0.5)
        self._latent_cache = {}
        self.one = torch.tensor(1.0)

    def encode(self, images, key):
        if key not in self._latent_cache:
            self._latent_cache[key] = self.encoder(images)
        return self._latent_cache[key]

    def train_step(self, images, key):
        self.encoder.train()
        self.decoder.train()
        free_params(self.encoder)
        free_params(self.decoder)
        self.enc_optim.zero_grad()
        self.dec_optim.zero_grad()
        batch_size = images.size(0)

        # ======== Train Generator ======== #
        z = self.encode(images, key)
        x_recon = self.decoder(z)
        recon_loss = self.criterion(x_recon, images)

        # ======== MMD Kernel Loss ======== #
        z_fake = torch.randn(batch_size, self.args.n_z) * self.args.sigma
        z_real = self.encode(images, key)
        mmd_loss = imq_kernel(z_real, z_fake, h_dim=self.encoder.n_z) / batch_size
        total_loss = recon_loss + self.args.LAMBDA * mmd_loss
        total_loss.backward(self.one)

        self.enc_optim.step()
        self.dec_optim.step()
        return recon_loss.item(), mmd_loss.item()

    @torch.no_grad()
    def evaluate(self, batches):
        self.encoder.eval()
        self.decoder.eval()
        rec, mmd = 0.0, 0.0
        for images in batches:
            z = self.encoder(images)
            rec += self.criterion(self.decoder(z), images).item()
            mmd += imq_kernel(z, torch.randn_like(z) * self.args.sigma, self.args.n_z).item() / images.size(0)
        return rec / len(batches), mmd / len(batches)

    def fit(self, train_batches, test_batches):
        for epoch in range(self.args.epochs):
            self._latent_cache.clear()
            for step, images in enumerate(train_batches):
                r, m = self.train_step(images, key=(epoch, step))
            self.enc_scheduler.step()
            self.dec_scheduler.step()
            er, em = self.evaluate(test_batches)
            print(f"Epoch [{epoch + 1}/{self.args.epochs}] recon {r:.4f} mmd {m:.4f} | test recon {er:.4f} mmd {em:.4f}")


def main():
    args = get_args()
    torch.manual_seed(args.seed)
    train = [torch.rand(args.batch_size, 1, 16, 16) for _ in range(args.n_batches)]
    test = [torch.rand(args.batch_size, 1, 16, 16)]
    WAERunner(args).fit(train, test)


if __name__ == "__main__":
    main()
