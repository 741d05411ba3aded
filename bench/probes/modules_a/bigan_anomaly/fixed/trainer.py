import torch
import torch.nn as nn
from torch import optim

from model import Generator, Encoder, Discriminator, weights_init_normal


class TrainerBiGAN:
    def __init__(self, args, data, device):
        self.args = args
        self.train_loader = data
        self.device = device

    def train(self):
        """Training the BiGAN"""
        self.G = Generator(self.args.latent_dim).to(self.device)
        self.E = Encoder(self.args.latent_dim).to(self.device)
        self.D = Discriminator(self.args.latent_dim).to(self.device)

        self.G.apply(weights_init_normal)
        self.E.apply(weights_init_normal)
        self.D.apply(weights_init_normal)

        optimizer_ge = optim.Adam(list(self.G.parameters()) +
                                  list(self.E.parameters()), lr=self.args.lr_adam)
        optimizer_d = optim.Adam(self.D.parameters(), lr=self.args.lr_adam)

        criterion = nn.BCELoss()
        for epoch in range(self.args.num_epochs):
            g_losses = 0
            d_losses = 0
            for x, _ in self.train_loader:
                #Defining labels
                y_true = torch.ones((x.size(0), 1, 1, 1)).to(self.device)
                y_fake = torch.zeros((x.size(0), 1, 1, 1)).to(self.device)

                #Noise for improving training.
                sigma = 0.1 * (self.args.num_epochs - epoch) / self.args.num_epochs
                noise1 = torch.Tensor(x.size()).normal_(0, sigma).to(self.device)
                noise2 = torch.Tensor(x.size()).normal_(0, sigma).to(self.device)

                #Cleaning gradients.
                optimizer_d.zero_grad()
                optimizer_ge.zero_grad()

                #Generator:
                z_fake = torch.randn((x.size(0), self.args.latent_dim, 1, 1)).to(self.device)
                x_fake = self.G(z_fake)

                #Encoder:
                x_true = x.float().to(self.device)
                z_true = self.E(x_true)

                #Discriminator
                out_true = self.D(x_true + noise1, z_true)
                out_fake = self.D(x_fake + noise2, z_fake)

                #Losses
                loss_d = criterion(out_true, y_true) + criterion(out_fake, y_fake)

                #Computing gradients and backpropagate.
                loss_d.backward()
                optimizer_d.step()

                #Cleaning gradients.
                optimizer_ge.zero_grad()

                z_fake = torch.randn((x.size(0), self.args.latent_dim, 1, 1)).to(self.device)
                x_fake = self.G(z_fake)
                z_true = self.E(x_true)
                out_true = self.D(x_true + noise1, z_true)
                out_fake = self.D(x_fake + noise2, z_fake)
                loss_ge = criterion(out_fake, y_true) + criterion(out_true, y_fake)

                loss_ge.backward()
                optimizer_ge.step()

                d_losses += loss_d.item()
                g_losses += loss_ge.item()

            print("Training... Epoch: {}, Discrimiantor Loss: {:.3f}, Generator Loss: {:.3f}".format(
                epoch, d_losses/len(self.train_loader), g_losses/len(self.train_loader)
            ))
