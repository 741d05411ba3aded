# expect: freed_graph
# source: https://github.com/KupynOrest/DeblurGAN/issues/56
"""Blind motion deblurring with a conditional GAN trained against a WGAN-GP critic.

DeblurGAN-style layout: a ResNet generator that learns the residual between the
blurred and the sharp image, a PatchGAN critic, a content (feature) loss computed
on a frozen feature extractor, and several critic updates per generator update.
Data are synthetic: smooth random "sharp" images and a box-blurred version.
"""
import argparse
import time
from collections import OrderedDict

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_options():
    p = argparse.ArgumentParser(description="DeblurGAN / WGAN-GP")
    p.add_argument("--batch_size", type=int, default=4)
    p.add_argument("--fine_size", type=int, default=32)
    p.add_argument("--ngf", type=int, default=8)
    p.add_argument("--ndf", type=int, default=8)
    p.add_argument("--n_blocks", type=int, default=2)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--beta1", type=float, default=0.5)
    p.add_argument("--lambda_A", type=float, default=100.0)
    p.add_argument("--lambda_gp", type=float, default=10.0)
    p.add_argument("--critic_iters", type=int, default=5)
    p.add_argument("--learn_residual", action="store_true", default=True)
    p.add_argument("--niter", type=int, default=2)
    p.add_argument("--n_batches", type=int, default=3)
    p.add_argument("--print_freq", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args([])


class ResnetBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.conv_block = nn.Sequential(
            nn.ReflectionPad2d(1), nn.Conv2d(dim, dim, 3), nn.InstanceNorm2d(dim), nn.ReLU(True),
            nn.ReflectionPad2d(1), nn.Conv2d(dim, dim, 3), nn.InstanceNorm2d(dim))

    def forward(self, x):
        return x + self.conv_block(x)


class ResnetGenerator(nn.Module):
    def __init__(self, input_nc=3, output_nc=3, ngf=8, n_blocks=2, learn_residual=True):
        super().__init__()
        self.learn_residual = learn_residual
        model = [nn.ReflectionPad2d(3), nn.Conv2d(input_nc, ngf, 7), nn.InstanceNorm2d(ngf), nn.ReLU(True)]
        for i in range(2):
            mult = 2 ** i
            model += [nn.Conv2d(ngf * mult, ngf * mult * 2, 3, stride=2, padding=1),
                      nn.InstanceNorm2d(ngf * mult * 2), nn.ReLU(True)]
        for _ in range(n_blocks):
            model += [ResnetBlock(ngf * 4)]
        for i in range(2):
            mult = 2 ** (2 - i)
            model += [nn.ConvTranspose2d(ngf * mult, ngf * mult // 2, 3, stride=2, padding=1, output_padding=1),
                      nn.InstanceNorm2d(ngf * mult // 2), nn.ReLU(True)]
        model += [nn.ReflectionPad2d(3), nn.Conv2d(ngf, output_nc, 7), nn.Tanh()]
        self.model = nn.Sequential(*model)

    def forward(self, x):
        out = self.model(x)
        if self.learn_residual:
            out = x + out
            out = torch.clamp(out, min=-1, max=1)
        return out


class NLayerDiscriminator(nn.Module):
    def __init__(self, input_nc=3, ndf=8, n_layers=3):
        super().__init__()
        seq = [nn.Conv2d(input_nc, ndf, 4, stride=2, padding=1), nn.LeakyReLU(0.2)]
        nf = ndf
        for _ in range(1, n_layers):
            nf_prev, nf = nf, min(nf * 2, 64)
            seq += [nn.Conv2d(nf_prev, nf, 4, stride=2, padding=1), nn.LeakyReLU(0.2)]
        seq += [nn.Conv2d(nf, 1, 3, stride=1, padding=1)]
        self.model = nn.Sequential(*seq)

    def forward(self, x):
        return self.model(x)


class PerceptualLoss:
    """Content loss on a frozen convolutional feature extractor (stand-in for VGG conv3_3)."""

    def __init__(self):
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU())
        for p in self.features.parameters():
            p.requires_grad = False
        self.criterion = nn.MSELoss()

    def get_loss(self, fake_im, real_im):
        f_fake = self.features(fake_im)
        f_real = self.features(real_im).detach()
        return self.criterion(f_fake, f_real)


class DiscLossWGANGP:
    def __init__(self, opt):
        self.LAMBDA = opt.lambda_gp

    def name(self):
        return "DiscLossWGAN-GP"

    def get_g_loss(self, net, fake_B):
        self.D_fake = net(fake_B)
        return -self.D_fake.mean()

    def calc_gradient_penalty(self, netD, real_data, fake_data):
        alpha = torch.rand(real_data.size(0), 1, 1, 1).expand_as(real_data)
        interpolates = alpha * real_data + ((1 - alpha) * fake_data)
        interpolates.requires_grad_(True)
        disc_interpolates = netD(interpolates)
        gradients = torch.autograd.grad(outputs=disc_interpolates, inputs=interpolates,
                                        grad_outputs=torch.ones_like(disc_interpolates),
                                        create_graph=True, retain_graph=True, only_inputs=True)[0]
        gradients = gradients.view(gradients.size(0), -1)
        return ((gradients.norm(2, dim=1) - 1) ** 2).mean() * self.LAMBDA

    def get_loss(self, net, real_B, fake_B):
        self.D_fake = net(fake_B.detach()).mean()
        self.D_real = net(real_B).mean()
        self.loss_D = self.D_fake - self.D_real
        gradient_penalty = self.calc_gradient_penalty(net, real_B, fake_B)
        return self.loss_D + gradient_penalty


class ConditionalGAN:
    def __init__(self, opt):
        self.opt = opt
        self.netG = ResnetGenerator(ngf=opt.ngf, n_blocks=opt.n_blocks, learn_residual=opt.learn_residual)
        self.netD = NLayerDiscriminator(ndf=opt.ndf)
        self.optimizer_G = torch.optim.Adam(self.netG.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))
        self.optimizer_D = torch.optim.Adam(self.netD.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))
        self.criticUpdates = opt.critic_iters
        self.discLoss = DiscLossWGANGP(opt)
        self.contentLoss = PerceptualLoss()

    def set_input(self, batch):
        self.real_A = batch["A"]
        self.real_B = batch["B"]

    def forward(self):
        self.fake_B = self.netG(self.real_A)

    def backward_D(self):
        self.loss_D = self.discLoss.get_loss(self.netD, self.real_B, self.fake_B)
        self.loss_D.backward()  # raises

    def backward_G(self):
        self.loss_G_GAN = self.discLoss.get_g_loss(self.netD, self.fake_B)
        self.loss_G_Content = self.contentLoss.get_loss(self.fake_B, self.real_B) * self.opt.lambda_A
        self.loss_G = self.loss_G_GAN + self.loss_G_Content
        self.loss_G.backward()

    def optimize_parameters(self):
        self.forward()
        for _ in range(self.criticUpdates):
            self.optimizer_D.zero_grad()
            self.backward_D()
            self.optimizer_D.step()
        self.optimizer_G.zero_grad()
        self.backward_G()
        self.optimizer_G.step()

    def get_current_errors(self):
        return OrderedDict([("G_GAN", self.loss_G_GAN.item()),
                            ("G_L1", self.loss_G_Content.item()),
                            ("D_real+fake", self.loss_D.item())])


def make_blur_dataset(opt):
    g = torch.Generator().manual_seed(opt.seed)
    kernel = torch.ones(3, 1, 5, 5) / 25.0
    batches = []
    for _ in range(opt.n_batches):
        coarse = torch.rand(opt.batch_size, 3, opt.fine_size // 4, opt.fine_size // 4, generator=g)
        sharp = F.interpolate(coarse, size=opt.fine_size, mode="bilinear", align_corners=False) * 2 - 1
        blurred = F.conv2d(F.pad(sharp, (2, 2, 2, 2), mode="replicate"), kernel, groups=3)
        batches.append({"A": blurred, "B": sharp})
    return batches


def train(opt):
    torch.manual_seed(opt.seed)
    dataset = make_blur_dataset(opt)
    model = ConditionalGAN(opt)
    total_steps = 0
    for epoch in range(1, opt.niter + 1):
        epoch_start_time = time.time()
        for data in dataset:
            total_steps += opt.batch_size
            model.set_input(data)
            model.optimize_parameters()
            if total_steps % opt.print_freq == 0:
                errors = model.get_current_errors()
                msg = " ".join("%s: %.3f" % (k, v) for k, v in errors.items())
                print("(epoch: %d, iters: %d) %s" % (epoch, total_steps, msg))
        print("End of epoch %d \t Time Taken: %.2f sec" % (epoch, time.time() - epoch_start_time))


if __name__ == "__main__":
    train(get_options())
