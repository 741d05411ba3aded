# expect: inplace_version
# source: https://github.com/YannDubs/disentangling-vae/issues/62
"""FactorVAE training on a tiny synthetic dSprites-like dataset.

Mirrors the layout of the disentangling-vae project: a VAE with a Burgess-style
encoder/decoder, a loss module hierarchy (BaseLoss -> FactorKLoss) whose
FactorKLoss owns a total-correlation discriminator and its own optimizer and
runs both updates inside `call_optimize`, a storer dict for logged losses, a
Trainer that dispatches on the loss type, and an Evaluator.
"""
import argparse
from collections import defaultdict

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim

def parse_arguments(args_to_parse=()):
    parser = argparse.ArgumentParser(description="PyTorch implementation of FactorVAE.")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--latent-dim", type=int, default=10)
    parser.add_argument("--img-size", type=int, default=16)
    parser.add_argument("--loss", type=str, default="factor")
    parser.add_argument("--rec-dist", type=str, default="bernoulli")
    parser.add_argument("--reg-anneal", type=int, default=100)
    parser.add_argument("--factor-G", type=float, default=6.0)
    parser.add_argument("--lr-disc", type=float, default=5e-5)
    parser.add_argument("--n-train", type=int, default=256)
    return parser.parse_args(list(args_to_parse))


def linear_annealing(init, fin, step, annealing_steps):
    """Linear annealing of a parameter."""
    if annealing_steps == 0:
        return fin
    return min(init + (fin - init) * step / annealing_steps, fin)


def _reconstruction_loss(data, recon_data, distribution="bernoulli", storer=None):
    batch_size = recon_data.size(0)
    if distribution == "bernoulli":
        loss = F.binary_cross_entropy(recon_data, data, reduction="sum")
    else:
        loss = F.mse_loss(recon_data * 255, data * 255, reduction="sum") / 255
    loss = loss / batch_size
    if storer is not None:
        storer["recon_loss"].append(loss.item())
    return loss


def _kl_normal_loss(mean, logvar, storer=None):
    latent_kl = 0.5 * (-1 - logvar + mean.pow(2) + logvar.exp()).mean(dim=0)
    total_kl = latent_kl.sum()
    if storer is not None:
        storer["kl_loss"].append(total_kl.item())
    return total_kl


def _permute_dims(latent_sample):
    """Implementation of Algorithm 1 in ref [1]. Randomly permutes the sample
    from q(z) (latent_dist) across the batch for each of the latent dimensions."""
    perm = torch.zeros_like(latent_sample)
    batch_size, dim_z = perm.size()
    for z in range(dim_z):
        pi = torch.randperm(batch_size).to(latent_sample.device)
        perm[:, z] = latent_sample[pi, z]
    return perm


class Discriminator(nn.Module):
    def __init__(self, neg_slope=0.2, latent_dim=10, hidden_units=64):
        super().__init__()
        self.neg_slope = neg_slope
        self.lin1 = nn.Linear(latent_dim, hidden_units)
        self.lin2 = nn.Linear(hidden_units, hidden_units)
        self.lin3 = nn.Linear(hidden_units, 2)

    def forward(self, z):
        z = F.leaky_relu(self.lin1(z), self.neg_slope)
        z = F.leaky_relu(self.lin2(z), self.neg_slope)
        return self.lin3(z)


class BaseLoss:
    def __init__(self, record_loss_every=50, rec_dist="bernoulli", steps_anneal=0):
        self.n_train_steps = 0
        self.record_loss_every = record_loss_every
        self.rec_dist = rec_dist
        self.steps_anneal = steps_anneal

    def _pre_call(self, is_train, storer):
        if is_train:
            self.n_train_steps += 1
        if is_train and self.n_train_steps % self.record_loss_every != 1:
            storer = None
        return storer


class FactorKLoss(BaseLoss):
    """Compute the Factor-VAE loss as per Algorithm 2 of Kim & Mnih (2018)."""

    def __init__(self, device, gamma=10., disc_kwargs={},
                 optim_kwargs=dict(lr=5e-5, betas=(0.5, 0.9)), **kwargs):
        super().__init__(**kwargs)
        self.gamma = gamma
        self.device = device
        self.discriminator = Discriminator(**disc_kwargs).to(self.device)
        self.optimizer_d = optim.Adam(self.discriminator.parameters(), **optim_kwargs)

    def call_optimize(self, data, model, optimizer, storer):
        storer = self._pre_call(model.training, storer)

        # factor-vae split data into two batches. In the paper they sample 2 batches
        batch_size = data.size(dim=0)
        half_batch_size = batch_size // 2
        data = data.split(half_batch_size)
        data1 = data[0]
        data2 = data[1]

        # Factor VAE Loss
        recon_batch, latent_dist, latent_sample1 = model(data1)
        rec_loss = _reconstruction_loss(data1, recon_batch, storer=storer, distribution=self.rec_dist)
        kl_loss = _kl_normal_loss(*latent_dist, storer)

        d_z = self.discriminator(latent_sample1)
        # We want log(p_true/p_false). If not using logisitc regression but softmax
        # then p_true = exp(logit_true) / Z; p_false = exp(logit_false) / Z
        # so log(p_true/p_false) = logit_true - logit_false
        tc_loss = (d_z[:, 0] - d_z[:, 1]).mean()

        anneal_reg = (linear_annealing(0, 1, self.n_train_steps, self.steps_anneal)
                      if model.training else 1)
        vae_loss = rec_loss + kl_loss + anneal_reg * self.gamma * tc_loss

        if storer is not None:
            storer["loss"].append(vae_loss.item())
            storer["tc_loss"].append(tc_loss.item())

        if not model.training:
            # don't backprop if evaluating
            return vae_loss

        # Run VAE optimizer
        optimizer.zero_grad()
        vae_loss.backward(retain_graph=True)
        optimizer.step()

        # Discriminator Loss
        # Get second sample of latent distribution
        latent_sample2 = model.sample_latent(data2)
        z_perm = _permute_dims(latent_sample2).detach()
        d_z_perm = self.discriminator(z_perm)

        # Calculate total correlation loss
        ones = torch.ones(half_batch_size, dtype=torch.long, device=self.device)
        zeros = torch.zeros_like(ones)
        d_tc_loss = 0.5 * (F.cross_entropy(d_z, zeros) + F.cross_entropy(d_z_perm, ones))

        # Run discriminator optimizer
        self.optimizer_d.zero_grad()
        d_tc_loss.backward()  # raises
        self.optimizer_d.step()

        if storer is not None:
            storer["discrim_loss"].append(d_tc_loss.item())

        return vae_loss


class EncoderBurgess(nn.Module):
    def __init__(self, img_size, latent_dim=10, hidden_dim=64):
        super().__init__()
        self.latent_dim = latent_dim
        self.lin1 = nn.Linear(img_size * img_size, hidden_dim)
        self.lin2 = nn.Linear(hidden_dim, hidden_dim)
        self.mu_logvar_gen = nn.Linear(hidden_dim, self.latent_dim * 2)

    def forward(self, x):
        x = torch.relu(self.lin1(x.view(x.size(0), -1)))
        x = torch.relu(self.lin2(x))
        mu_logvar = self.mu_logvar_gen(x).view(-1, self.latent_dim, 2)
        return mu_logvar.unbind(-1)


class DecoderBurgess(nn.Module):
    def __init__(self, img_size, latent_dim=10, hidden_dim=64):
        super().__init__()
        self.img_size = img_size
        self.lin1 = nn.Linear(latent_dim, hidden_dim)
        self.lin2 = nn.Linear(hidden_dim, img_size * img_size)

    def forward(self, z):
        x = torch.relu(self.lin1(z))
        return torch.sigmoid(self.lin2(x)).view(-1, 1, self.img_size, self.img_size)


class VAE(nn.Module):
    def __init__(self, img_size, latent_dim):
        super().__init__()
        self.latent_dim = latent_dim
        self.encoder = EncoderBurgess(img_size, latent_dim)
        self.decoder = DecoderBurgess(img_size, latent_dim)

    def reparameterize(self, mean, logvar):
        if self.training:
            std = torch.exp(0.5 * logvar)
            return mean + std * torch.randn_like(std)
        return mean

    def forward(self, x):
        latent_dist = self.encoder(x)
        latent_sample = self.reparameterize(*latent_dist)
        return self.decoder(latent_sample), latent_dist, latent_sample

    def sample_latent(self, x):
        return self.reparameterize(*self.encoder(x))


class Trainer:
    def __init__(self, model, optimizer, loss_f, device=torch.device("cpu")):
        self.device = device
        self.model = model.to(self.device)
        self.loss_f = loss_f
        self.optimizer = optimizer

    def __call__(self, data_loader, epochs=10):
        self.model.train()
        for epoch in range(epochs):
            storer = defaultdict(list)
            mean_epoch_loss = self._train_epoch(data_loader, storer, epoch)
            print("Epoch: {} Average loss per image: {:.2f}".format(epoch + 1, mean_epoch_loss))
        self.model.eval()

    def _train_epoch(self, data_loader, storer, epoch):
        epoch_loss = 0.
        for data in data_loader:
            epoch_loss += self._train_iteration(data, storer)
        return epoch_loss / len(data_loader)

    def _train_iteration(self, data, storer):
        data = data.to(self.device)
        if isinstance(self.loss_f, FactorKLoss):
            loss = self.loss_f.call_optimize(data, self.model, self.optimizer, storer)
        else:
            recon_batch, latent_dist, latent_sample = self.model(data)
            loss = _reconstruction_loss(data, recon_batch) + _kl_normal_loss(*latent_dist)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
        return loss.item()


class Evaluator:
    def __init__(self, model, loss_f, device=torch.device("cpu")):
        self.model, self.loss_f, self.device = model, loss_f, device

    @torch.no_grad()
    def __call__(self, data_loader):
        self.model.eval()
        storer = defaultdict(list)
        for data in data_loader:
            self.loss_f.call_optimize(data.to(self.device), self.model, None, storer)
        return {k: sum(v) / len(v) for k, v in storer.items()}


def make_sprites(n, img_size, generator):
    imgs = torch.zeros(n, 1, img_size, img_size)
    for i in range(n):
        s = int(torch.randint(3, 7, (1,), generator=generator))
        r, c = torch.randint(0, img_size - s, (2,), generator=generator).tolist()
        imgs[i, 0, r:r + s, c:c + s] = 1.0
    return imgs


def main(args):
    torch.manual_seed(args.seed)
    device = torch.device("cpu")
    data = make_sprites(args.n_train, args.img_size, torch.Generator().manual_seed(args.seed))
    train_loader = list(data.split(args.batch_size))
    model = VAE(args.img_size, args.latent_dim)
    optimizer = optim.Adam(model.parameters(), lr=args.lr)
    loss_f = FactorKLoss(device, gamma=args.factor_G, disc_kwargs=dict(latent_dim=args.latent_dim),
                         optim_kwargs=dict(lr=args.lr_disc, betas=(0.5, 0.9)),
                         rec_dist=args.rec_dist, steps_anneal=args.reg_anneal, record_loss_every=5)
    trainer = Trainer(model, optimizer, loss_f, device=device)
    trainer(train_loader, epochs=args.epochs)
    metrics = Evaluator(model, loss_f, device=device)(train_loader[:2])
    print("Test loss: {:.3f}".format(metrics["loss"]))


if __name__ == "__main__":
    main(parse_arguments())
