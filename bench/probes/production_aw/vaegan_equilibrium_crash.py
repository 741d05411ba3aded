# expect: inplace_version
# source: https://github.com/ry85/VAE-GAN/issues/1
"""VAE-GAN (Larsen et al.) on synthetic face-like images.

Follows the original project: an options object, encoder / decoder / discriminator
blocks, a VaeGan module whose discriminator also returns an intermediate layer for
the learned-similarity reconstruction loss, a static loss function, one RMSprop
optimizer plus ExponentialLR scheduler per sub-network, and the equilibrium/margin
logic that selectively disables decoder or discriminator updates.
"""
import argparse
import random

import numpy
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim import RMSprop
from torch.optim.lr_scheduler import ExponentialLR


def get_args():
    parser = argparse.ArgumentParser(description='VAE-GAN')
    parser.add_argument('--batch_size', type=int, default=8)
    parser.add_argument('--input_size', type=int, default=16)
    parser.add_argument('--z_size', type=int, default=16)
    parser.add_argument('--recon_level', type=int, default=3)
    parser.add_argument('--n_epochs', type=int, default=1)
    parser.add_argument('--n_batches', type=int, default=4)
    parser.add_argument('--lambda_mse', type=float, default=1e-6)
    parser.add_argument('--lr', type=float, default=3e-4)
    parser.add_argument('--decay_lr', type=float, default=0.75)
    parser.add_argument('--decay_mse', type=float, default=1.0)
    parser.add_argument('--decay_margin', type=float, default=1.0)
    parser.add_argument('--decay_equilibrium', type=float, default=1.0)
    return parser.parse_args([])


# encoder block (used in encoder and discriminator)
class EncoderBlock(nn.Module):
    def __init__(self, channel_in, channel_out):
        super(EncoderBlock, self).__init__()
        self.conv = nn.Conv2d(channel_in, channel_out, kernel_size=5, padding=2, stride=2, bias=False)
        self.bn = nn.BatchNorm2d(num_features=channel_out, momentum=0.9)

    def forward(self, ten, out=False):
        # here we want to be able to take an intermediate output for reconstruction error
        if out:
            ten = self.conv(ten)
            ten_out = ten
            ten = F.relu(self.bn(ten), False)
            return ten, ten_out
        ten = self.conv(ten)
        return F.relu(self.bn(ten), True)


# decoder block (used in the decoder)
class DecoderBlock(nn.Module):
    def __init__(self, channel_in, channel_out):
        super(DecoderBlock, self).__init__()
        self.conv = nn.ConvTranspose2d(channel_in, channel_out, kernel_size=5, padding=2, stride=2,
                                       output_padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channel_out, momentum=0.9)

    def forward(self, ten):
        return F.relu(self.bn(self.conv(ten)), True)


class Encoder(nn.Module):
    def __init__(self, channel_in=3, z_size=128, hw=2):
        super(Encoder, self).__init__()
        self.size = channel_in
        layers_list = []
        for i in range(3):
            if i == 0:
                layers_list.append(EncoderBlock(channel_in=self.size, channel_out=8))
                self.size = 8
            else:
                layers_list.append(EncoderBlock(channel_in=self.size, channel_out=self.size * 2))
                self.size *= 2
        self.conv = nn.Sequential(*layers_list)
        self.fc = nn.Sequential(nn.Linear(hw * hw * self.size, 64, bias=False),
                                nn.BatchNorm1d(num_features=64, momentum=0.9), nn.ReLU(True))
        # two linear to get the mu vector and the diagonal of the log_variance
        self.l_mu = nn.Linear(64, z_size)
        self.l_var = nn.Linear(64, z_size)

    def forward(self, ten):
        ten = self.conv(ten)
        ten = self.fc(ten.view(len(ten), -1))
        return self.l_mu(ten), self.l_var(ten)


class Decoder(nn.Module):
    def __init__(self, z_size, size, hw=2):
        super(Decoder, self).__init__()
        self.hw = hw
        self.fc = nn.Sequential(nn.Linear(z_size, hw * hw * size, bias=False),
                                nn.BatchNorm1d(num_features=hw * hw * size, momentum=0.9), nn.ReLU(True))
        self.size = size
        layers_list = [DecoderBlock(self.size, self.size), DecoderBlock(self.size, self.size // 2)]
        self.size = self.size // 2
        layers_list.append(DecoderBlock(self.size, self.size // 4))
        self.size = self.size // 4
        layers_list.append(nn.Sequential(nn.Conv2d(self.size, 3, kernel_size=5, stride=1, padding=2), nn.Tanh()))
        self.conv = nn.Sequential(*layers_list)

    def forward(self, ten):
        ten = self.fc(ten)
        return self.conv(ten.view(len(ten), -1, self.hw, self.hw))


class Discriminator(nn.Module):
    def __init__(self, channel_in=3, recon_level=3, hw=2):
        super(Discriminator, self).__init__()
        self.recon_levl = recon_level
        self.conv = nn.ModuleList()
        self.conv.append(nn.Sequential(nn.Conv2d(channel_in, 8, kernel_size=5, stride=1, padding=2), nn.ReLU(inplace=True)))
        self.conv.append(EncoderBlock(8, 16))
        self.conv.append(EncoderBlock(16, 32))
        self.conv.append(EncoderBlock(32, 32))
        self.fc = nn.Sequential(nn.Linear(hw * hw * 32, 64, bias=False), nn.BatchNorm1d(num_features=64, momentum=0.9),
                                nn.ReLU(inplace=True), nn.Linear(64, 1))

    def forward(self, ten_orig, ten_predicted, ten_sampled, mode='REC'):
        ten = torch.cat((ten_orig, ten_predicted, ten_sampled), 0)
        if mode == 'REC':
            for i, lay in enumerate(self.conv):
                if i == self.recon_levl:
                    ten, layer_ten = lay(ten, True)
                    return layer_ten.view(len(layer_ten), -1)
                ten = lay(ten)
        for lay in self.conv:
            ten = lay(ten)
        ten = self.fc(ten.view(len(ten), -1))
        return torch.sigmoid(ten)


class VaeGan(nn.Module):
    def __init__(self, z_size=128, recon_level=3, input_size=16):
        super(VaeGan, self).__init__()
        hw = input_size // 8
        self.z_size = z_size
        self.encoder = Encoder(z_size=self.z_size, hw=hw)
        self.decoder = Decoder(z_size=self.z_size, size=self.encoder.size, hw=hw)
        self.discriminator = Discriminator(channel_in=3, recon_level=recon_level, hw=hw)
        self.init_parameters()

    def init_parameters(self):
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d, nn.Linear)):
                if getattr(m, 'weight', None) is not None and m.weight.requires_grad:
                    scale = 1.0 / numpy.sqrt(numpy.prod(m.weight.shape[1:])) / numpy.sqrt(3)
                    nn.init.uniform_(m.weight, -scale, scale)
                if getattr(m, 'bias', None) is not None and m.bias.requires_grad:
                    nn.init.constant_(m.bias, 0.0)

    def reparameterize(self, mu, logvar):
        logvar = logvar.mul(0.5).exp_()
        eps = logvar.data.new(logvar.size()).normal_()
        return eps.mul(logvar).add_(mu)

    def forward(self, x, gen_size=10):
        if self.training:
            mus, log_variances = self.encoder(x)
            z = self.reparameterize(mus, log_variances)
            x_tilde = self.decoder(z)
            z_p = torch.randn(len(x), self.z_size, requires_grad=True)
            x_p = self.decoder(z_p)
            disc_layer = self.discriminator(x, x_tilde, x_p, 'REC')  # discriminator for reconstruction
            disc_class = self.discriminator(x, x_tilde, x_p, 'GAN')
            return x_tilde, disc_class, disc_layer, mus, log_variances
        if x is None:
            return self.decoder(torch.randn(gen_size, self.z_size))
        mus, log_variances = self.encoder(x)
        return self.decoder(self.reparameterize(mus, log_variances))

    @staticmethod
    def loss(x, x_tilde, disc_layer_original, disc_layer_predicted, disc_layer_sampled, disc_class_original,
             disc_class_predicted, disc_class_sampled, mus, variances):
        nle = 0.5 * (x.view(len(x), -1) - x_tilde.view(len(x_tilde), -1)) ** 2
        kl = -0.5 * torch.sum(-variances.exp() - torch.pow(mus, 2) + variances + 1, 1)
        mse = torch.sum(0.5 * (disc_layer_original - disc_layer_predicted) ** 2, 1)
        bce_dis_original = -torch.log(disc_class_original + 1e-3)
        bce_dis_predicted = -torch.log(1 - disc_class_predicted + 1e-3)
        bce_dis_sampled = -torch.log(1 - disc_class_sampled + 1e-3)
        return nle, kl, mse, bce_dis_original, bce_dis_predicted, bce_dis_sampled


def get_loader(batch_size, input_size, n_batches, seed):
    g = torch.Generator().manual_seed(seed)
    base = torch.linspace(-1, 1, input_size)
    face = (base[None, :] ** 2 + base[:, None] ** 2).neg().exp()
    return [((face[None, None] + 0.3 * torch.randn(batch_size, 3, input_size, input_size, generator=g)).clamp(-1, 1),
             torch.zeros(batch_size)) for _ in range(n_batches)]


def train(args):
    net = VaeGan(z_size=args.z_size, recon_level=args.recon_level, input_size=args.input_size)
    train_loader = get_loader(args.batch_size, args.input_size, args.n_batches, seed=1)
    test_loader = get_loader(args.batch_size, args.input_size, 1, seed=2)
    margin, equilibrium, lambda_mse = 0.35, 0.68, args.lambda_mse

    # an optimizer for each of the sub-networks, so we can selectively backprop
    optimizer_encoder = RMSprop(params=net.encoder.parameters(), lr=args.lr, alpha=0.9, eps=1e-8)
    lr_encoder = ExponentialLR(optimizer_encoder, gamma=args.decay_lr)
    optimizer_decoder = RMSprop(params=net.decoder.parameters(), lr=args.lr, alpha=0.9, eps=1e-8)
    lr_decoder = ExponentialLR(optimizer_decoder, gamma=args.decay_lr)
    optimizer_discriminator = RMSprop(params=net.discriminator.parameters(), lr=args.lr, alpha=0.9, eps=1e-8)
    lr_discriminator = ExponentialLR(optimizer_discriminator, gamma=args.decay_lr)

    for i in range(args.n_epochs):
        for j, (x, label) in enumerate(train_loader):
            net.train()
            batch_size = len(x)
            x_tilde, disc_class, disc_layer, mus, log_variances = net(x)
            # split so we can get the different parts
            disc_layer_original = disc_layer[:batch_size]
            disc_layer_predicted = disc_layer[batch_size:-batch_size]
            disc_layer_sampled = disc_layer[-batch_size:]
            disc_class_original = disc_class[:batch_size]
            disc_class_predicted = disc_class[batch_size:-batch_size]
            disc_class_sampled = disc_class[-batch_size:]
            nle, kl, mse, bce_dis_original, bce_dis_predicted, bce_dis_sampled = VaeGan.loss(
                x, x_tilde, disc_layer_original, disc_layer_predicted, disc_layer_sampled,
                disc_class_original, disc_class_predicted, disc_class_sampled, mus, log_variances)

            loss_encoder = torch.sum(kl) + torch.sum(mse)
            loss_discriminator = torch.sum(bce_dis_original) + torch.sum(bce_dis_predicted) + torch.sum(bce_dis_sampled)
            loss_decoder = torch.sum(lambda_mse * mse) - (1.0 - lambda_mse) * loss_discriminator

            # selectively disable the decoder of the discriminator if they are unbalanced
            train_dis, train_dec = True, True
            if torch.mean(bce_dis_original).item() < equilibrium - margin or torch.mean(bce_dis_predicted).item() < equilibrium - margin:
                train_dis = False
            if torch.mean(bce_dis_original).item() > equilibrium + margin or torch.mean(bce_dis_predicted).item() > equilibrium + margin:
                train_dec = False
            if train_dec is False and train_dis is False:
                train_dis, train_dec = True, True

            net.zero_grad()
            # encoder
            loss_encoder.backward(retain_graph=True)
            optimizer_encoder.step()
            net.zero_grad()  # clean others, so they are not afflicted by encoder loss
            # decoder
            if train_dec:
                loss_decoder.backward(retain_graph=True)  # raises
                optimizer_decoder.step()
                net.discriminator.zero_grad()  # clean the discriminator
            # discriminator
            if train_dis:
                loss_discriminator.backward()
                optimizer_discriminator.step()

            print('[%02d/%02d] encoder loss: %.5f | decoder loss: %.5f | discriminator loss: %.5f'
                  % (i, j, loss_encoder.item(), loss_decoder.item(), loss_discriminator.item()))

        lr_encoder.step()
        lr_decoder.step()
        lr_discriminator.step()
        margin *= args.decay_margin
        equilibrium = max(equilibrium * args.decay_equilibrium, margin)
        lambda_mse = min(lambda_mse * args.decay_mse, 1)

        net.eval()
        with torch.no_grad():
            for x, _ in test_loader:
                recon = net(x)
                sampled = net(None, 10)
                print('epoch %d  recon mse %.4f  sample std %.4f' % (i, F.mse_loss(recon, x).item(), sampled.std().item()))


def main():
    numpy.random.seed(8)
    random.seed(999)
    torch.manual_seed(999)
    train(get_args())


if __name__ == '__main__':
    main()
