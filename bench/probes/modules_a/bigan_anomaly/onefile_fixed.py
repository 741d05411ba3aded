# expect: clean
# source: https://github.com/mperezcarrasco/PyTorch-BiGAN/issues/1
"""BiGAN (generator, encoder and joint x/z discriminator) trained on synthetic
32x32 RGB "normal" images, the first stage of a BiGAN anomaly detector; the
training loop lives in the TrainerBiGAN class."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Discriminator(nn.Module):
    def __init__(self, z_dim=32):
        super(Discriminator, self).__init__()

        # Inference over x
        self.conv1x = nn.Conv2d(3, 16, 5, stride=1, bias=False)
        self.conv2x, self.bn2x = nn.Conv2d(16, 32, 4, stride=2, bias=False), nn.BatchNorm2d(32)
        self.conv3x, self.bn3x = nn.Conv2d(32, 64, 4, stride=2, bias=False), nn.BatchNorm2d(64)
        self.conv4x, self.bn4x = nn.Conv2d(64, 128, 5, stride=1, bias=False), nn.BatchNorm2d(128)

        # Inference over z
        self.conv1z = nn.Conv2d(z_dim, 128, 1, stride=1, bias=False)
        self.conv2z = nn.Conv2d(128, 128, 1, stride=1, bias=False)

        # Joint inference
        self.conv1xz = nn.Conv2d(256, 256, 1, stride=1, bias=False)
        self.conv2xz = nn.Conv2d(256, 1, 1, stride=1, bias=True)

    def inf_x(self, x):
        x = F.dropout2d(F.leaky_relu(self.conv1x(x), negative_slope=0.1), 0.2)
        x = F.dropout2d(F.leaky_relu(self.bn2x(self.conv2x(x)), negative_slope=0.1), 0.2)
        x = F.dropout2d(F.leaky_relu(self.bn3x(self.conv3x(x)), negative_slope=0.1), 0.2)
        x = F.dropout2d(F.leaky_relu(self.bn4x(self.conv4x(x)), negative_slope=0.1), 0.2)
        return x

    def forward(self, x, z):
        x = self.inf_x(x)
        z = F.dropout2d(F.leaky_relu(self.conv1z(z), negative_slope=0.1), 0.2)
        z = F.dropout2d(F.leaky_relu(self.conv2z(z), negative_slope=0.1), 0.2)
        xz = torch.cat((x, z), dim=1)
        xz = F.dropout(F.leaky_relu(self.conv1xz(xz), negative_slope=0.1), 0.2)
        return torch.sigmoid(self.conv2xz(xz))


class Generator(nn.Module):
    def __init__(self, z_dim=32):
        super(Generator, self).__init__()
        self.z_dim = z_dim

        self.output_bias = nn.Parameter(torch.zeros(3, 32, 32), requires_grad=True)
        self.deconv1, self.bn1 = nn.ConvTranspose2d(z_dim, 128, 4, stride=1, bias=False), nn.BatchNorm2d(128)
        self.deconv2, self.bn2 = nn.ConvTranspose2d(128, 64, 4, stride=2, padding=1, bias=False), nn.BatchNorm2d(64)
        self.deconv3, self.bn3 = nn.ConvTranspose2d(64, 32, 4, stride=2, padding=1, bias=False), nn.BatchNorm2d(32)
        self.deconv4 = nn.ConvTranspose2d(32, 3, 4, stride=2, padding=1, bias=True)

    def forward(self, z):
        z = F.leaky_relu(self.bn1(self.deconv1(z)), negative_slope=0.1)
        z = F.leaky_relu(self.bn2(self.deconv2(z)), negative_slope=0.1)
        z = F.leaky_relu(self.bn3(self.deconv3(z)), negative_slope=0.1)
        return torch.tanh(self.deconv4(z) + self.output_bias)


class Encoder(nn.Module):
    def __init__(self, z_dim=32):
        super(Encoder, self).__init__()
        self.z_dim = z_dim
        self.conv1, self.bn1 = nn.Conv2d(3, 16, 5, stride=1, bias=False), nn.BatchNorm2d(16)
        self.conv2, self.bn2 = nn.Conv2d(16, 32, 4, stride=2, bias=False), nn.BatchNorm2d(32)
        self.conv3, self.bn3 = nn.Conv2d(32, 64, 4, stride=2, bias=False), nn.BatchNorm2d(64)
        self.conv4 = nn.Conv2d(64, z_dim * 2, 5, stride=1, bias=True)

    def reparameterize(self, z):
        z = z.view(z.size(0), -1)
        mu, log_sigma = z[:, :self.z_dim], z[:, self.z_dim:]
        return mu + torch.randn_like(mu) * torch.exp(log_sigma)

    def forward(self, x):
        x = F.leaky_relu(self.bn1(self.conv1(x)), negative_slope=0.1)
        x = F.leaky_relu(self.bn2(self.conv2(x)), negative_slope=0.1)
        x = F.leaky_relu(self.bn3(self.conv3(x)), negative_slope=0.1)
        z = self.reparameterize(self.conv4(x))
        return z.view(x.size(0), self.z_dim, 1, 1)


def weights_init_normal(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        torch.nn.init.normal_(m.weight.data, 0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        torch.nn.init.normal_(m.weight.data, 1.0, 0.02)
        torch.nn.init.constant_(m.bias.data, 0.0)


import torch
import torch.nn as nn
from torch import optim



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


import argparse

import torch



def get_synthetic_loader(args):
    """Stand-in for get_cifar10: smooth random textures in [-1, 1]."""
    g = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(args.num_batches):
        base = torch.rand(args.batch_size, 3, 8, 8, generator=g)
        x = torch.nn.functional.interpolate(base, size=32, mode="bilinear", align_corners=False)
        batches.append((x * 2 - 1, torch.zeros(args.batch_size, dtype=torch.long)))
    return batches


if __name__ == '__main__':
    torch.manual_seed(0)
    parser = argparse.ArgumentParser()
    parser.add_argument("--num_epochs", type=int, default=2, help="number of epochs")
    parser.add_argument('--lr_adam', type=float, default=1e-4, help='learning rate')
    parser.add_argument("--batch_size", type=int, default=8, help="Batch size")
    parser.add_argument("--num_batches", type=int, default=3, help="batches per epoch")
    parser.add_argument('--latent_dim', type=int, default=32,
                        help='Dimension of the latent variable z')
    args = parser.parse_args()

    device = torch.device('cpu')
    data = get_synthetic_loader(args)
    bigan = TrainerBiGAN(args, data, device)
    bigan.train()
