# expect: freed_graph
# source: https://github.com/eriklindernoren/PyTorch-GAN/issues/6
"""Wasserstein GAN with weight clipping (Arjovsky et al.), n_critic updates
of the critic per generator update. Synthetic 8x8 single-channel images.
"""
import argparse

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def get_options(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument('--n_epochs', type=int, default=3, help='number of epochs of training')
    parser.add_argument('--batch_size', type=int, default=32, help='size of the batches')
    parser.add_argument('--lr', type=float, default=0.00005, help='learning rate')
    parser.add_argument('--latent_dim', type=int, default=16, help='dimensionality of the latent space')
    parser.add_argument('--img_size', type=int, default=8, help='size of each image dimension')
    parser.add_argument('--channels', type=int, default=1, help='number of image channels')
    parser.add_argument('--n_critic', type=int, default=5, help='number of training steps for discriminator per iter')
    parser.add_argument('--clip_value', type=float, default=0.01, help='lower and upper clip value for disc. weights')
    parser.add_argument('--sample_interval', type=int, default=10, help='interval betwen image samples')
    parser.add_argument('--seed', type=int, default=0)
    return parser.parse_args(argv)


def weights_init_normal(m):
    classname = m.__class__.__name__
    if classname.find('Linear') != -1:
        m.weight.data.normal_(0.0, 0.02)
    elif classname.find('BatchNorm') != -1:
        m.weight.data.normal_(1.0, 0.02)
        m.bias.data.fill_(0)


class Generator(nn.Module):
    def __init__(self, opt):
        super(Generator, self).__init__()
        self.opt = opt

        def block(in_feat, out_feat, normalize=True):
            layers = [nn.Linear(in_feat, out_feat)]
            if normalize:
                layers.append(nn.BatchNorm1d(out_feat, 0.8))
            layers.append(nn.LeakyReLU(0.2, inplace=True))
            return layers

        self.model = nn.Sequential(
            *block(opt.latent_dim, 32, normalize=False),
            *block(32, 64),
            *block(64, 128),
            nn.Linear(128, opt.channels * opt.img_size ** 2),
            nn.Tanh()
        )

    def forward(self, noise):
        img = self.model(noise)
        return img.view(img.shape[0], self.opt.channels, self.opt.img_size, self.opt.img_size)


class Discriminator(nn.Module):
    def __init__(self, opt):
        super(Discriminator, self).__init__()
        self.model = nn.Sequential(
            nn.Linear(opt.channels * opt.img_size ** 2, 128),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Linear(128, 64),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Linear(64, 1)
        )

    def forward(self, img):
        img_flat = img.view(img.shape[0], -1)
        return self.model(img_flat)


def make_dataloader(opt, n=512):
    """Blurry strokes: a smooth random curve rendered on an img_size grid."""
    rng = np.random.RandomState(opt.seed)
    xs = np.linspace(-1, 1, opt.img_size)
    yy, xx = np.meshgrid(xs, xs, indexing='ij')
    imgs = []
    for _ in range(n):
        a, b, c = rng.uniform(-1, 1, 3)
        dist = np.abs(yy - (a * xx ** 2 + b * xx + c * 0.5))
        imgs.append(np.exp(-dist ** 2 / 0.05) * 2 - 1)
    data = torch.tensor(np.stack(imgs)[:, None], dtype=torch.float32)
    g = torch.Generator().manual_seed(opt.seed)
    return DataLoader(TensorDataset(data, torch.zeros(n)), batch_size=opt.batch_size,
                      shuffle=True, drop_last=True, generator=g)


class WGANTrainer:
    def __init__(self, opt):
        torch.manual_seed(opt.seed)
        self.opt = opt
        self.generator = Generator(opt)
        self.discriminator = Discriminator(opt)
        self.generator.apply(weights_init_normal)
        self.discriminator.apply(weights_init_normal)
        self.optimizer_G = torch.optim.RMSprop(self.generator.parameters(), lr=opt.lr)
        self.optimizer_D = torch.optim.RMSprop(self.discriminator.parameters(), lr=opt.lr)
        self.batches_done = 0
        self.samples = []
        self.history = {'d_loss': [], 'g_loss': []}

    def sample_noise(self, n):
        return torch.randn(n, self.opt.latent_dim)

    def clip_critic(self):
        # Clip weights of discriminator
        for p in self.discriminator.parameters():
            p.data.clamp_(-self.opt.clip_value, self.opt.clip_value)

    def train_epoch(self, epoch, dataloader):
        opt = self.opt
        # Batch iterator
        data_iter = iter(dataloader)

        for i in range(len(data_iter) // opt.n_critic):
            # Train discriminator for n_critic times
            for _ in range(opt.n_critic):
                (imgs, _) = next(data_iter)

                # Adversarial ground truths
                valid = torch.full((imgs.shape[0], 1), -1.0)
                fake = torch.full((imgs.shape[0], 1), 1.0)

                # Configure input
                real_imgs = imgs.float()

                # ---------------------
                #  Train Discriminator
                # ---------------------
                self.optimizer_D.zero_grad()

                # Sample noise as generator input
                z = self.sample_noise(imgs.shape[0])

                # Generate a batch of images
                fake_imgs = self.generator(z)

                # Train on real images
                real_validity = self.discriminator(real_imgs)
                real_validity.backward(valid)
                # Train on fake images
                fake_validity = self.discriminator(fake_imgs)
                fake_validity.backward(fake)

                d_loss = real_validity - fake_validity

                self.optimizer_D.step()
                self.clip_critic()

            # -----------------
            #  Train Generator
            # -----------------
            self.optimizer_G.zero_grad()

            # Sample noise as generator input
            z = self.sample_noise(imgs.shape[0])

            # Generate a batch of images
            gen_imgs = self.generator(z)

            # Loss measures generator's ability to fool the discriminator
            # Train on fake images
            gen_validity = self.discriminator(fake_imgs)
            gen_validity.backward(valid)  # raises

            self.optimizer_G.step()

            self.history['d_loss'].append(d_loss.mean().item())
            self.history['g_loss'].append(gen_validity.mean().item())
            print("[Epoch %d/%d] [Batch %d/%d] [D loss: %f] [G loss: %f]" % (
                epoch, opt.n_epochs, i, len(dataloader) // opt.n_critic,
                self.history['d_loss'][-1], self.history['g_loss'][-1]))

            if self.batches_done % opt.sample_interval == 0:
                self.samples.append(gen_imgs.data[:25].clone())
            self.batches_done += 1

    def fit(self, dataloader):
        for epoch in range(self.opt.n_epochs):
            self.train_epoch(epoch, dataloader)
        return self.history


if __name__ == '__main__':
    opt = get_options([])
    trainer = WGANTrainer(opt)
    history = trainer.fit(make_dataloader(opt))
    print('final D loss %.4f, G loss %.4f' % (history['d_loss'][-1], history['g_loss'][-1]))
