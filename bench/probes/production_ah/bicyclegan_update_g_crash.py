# expect: inplace_version
# source: https://github.com/junyanz/BicycleGAN/issues/87
"""BicycleGAN (cVAE-GAN + cLR-GAN) for multimodal image-to-image translation.

Follows the structure of junyanz/BicycleGAN: an options Namespace, a model class
with set_input / forward / backward_D / backward_EG / backward_G_alone /
update_D / update_G_and_E, separate Adam optimizers for G, E, D and D2, and a
train loop that prints current losses. Tiny networks, synthetic paired images.
"""
import argparse
from collections import OrderedDict

import torch
import torch.nn as nn


def get_opt():
    opt = argparse.Namespace(
        input_nc=3, output_nc=3, nz=8, ngf=8, ndf=8, nef=8, fine_size=16,
        batch_size=4, lr=2e-4, beta1=0.5, lambda_L1=10.0, lambda_GAN=1.0,
        lambda_GAN2=1.0, lambda_kl=0.01, lambda_z=0.5, use_same_D=False,
        conditional_D=False, gan_mode="lsgan", niter=2, iters_per_epoch=3,
        isTrain=True, seed=0,
    )
    return opt


class GANLoss(nn.Module):
    def __init__(self, gan_mode="lsgan"):
        super().__init__()
        self.loss = nn.MSELoss() if gan_mode == "lsgan" else nn.BCEWithLogitsLoss()

    def forward(self, pred, target_is_real):
        target = torch.ones_like(pred) if target_is_real else torch.zeros_like(pred)
        return self.loss(pred, target), [pred.mean()]


class GeneratorAddAll(nn.Module):
    """Small encoder-decoder generator; z is broadcast and concatenated to the input."""

    def __init__(self, input_nc, output_nc, nz, ngf):
        super().__init__()
        self.nz = nz
        self.down = nn.Sequential(nn.Conv2d(input_nc + nz, ngf, 4, 2, 1), nn.LeakyReLU(0.2),
                                  nn.Conv2d(ngf, ngf * 2, 4, 2, 1), nn.LeakyReLU(0.2))
        self.up = nn.Sequential(nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1), nn.ReLU(),
                                nn.ConvTranspose2d(ngf, output_nc, 4, 2, 1), nn.Tanh())

    def forward(self, x, z):
        z_img = z.view(z.size(0), z.size(1), 1, 1).expand(z.size(0), z.size(1), x.size(2), x.size(3))
        return self.up(self.down(torch.cat([x, z_img], 1)))


class E_ResNet(nn.Module):
    def __init__(self, input_nc, output_nc, nef, vaeLike=True):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(input_nc, nef, 4, 2, 1), nn.LeakyReLU(0.2),
                                  nn.Conv2d(nef, nef * 2, 4, 2, 1), nn.LeakyReLU(0.2),
                                  nn.AdaptiveAvgPool2d(1))
        self.fc = nn.Linear(nef * 2, output_nc)
        self.fcVar = nn.Linear(nef * 2, output_nc)
        self.vaeLike = vaeLike

    def forward(self, x):
        h = self.conv(x).flatten(1)
        return self.fc(h), self.fcVar(h)


class D_NLayers(nn.Module):
    def __init__(self, input_nc, ndf):
        super().__init__()
        self.model = nn.Sequential(nn.Conv2d(input_nc, ndf, 4, 2, 1), nn.LeakyReLU(0.2),
                                   nn.Conv2d(ndf, 1, 4, 1, 1))

    def forward(self, x):
        return self.model(x)


class BiCycleGANModel:
    def __init__(self, opt):
        self.opt = opt
        self.loss_names = ["G_GAN", "D", "G_GAN2", "D2", "G_L1", "z_L1", "kl"]
        self.netG = GeneratorAddAll(opt.input_nc, opt.output_nc, opt.nz, opt.ngf)
        D_nc = opt.input_nc + opt.output_nc if opt.conditional_D else opt.output_nc
        self.netD = D_NLayers(D_nc, opt.ndf)
        self.netD2 = D_NLayers(D_nc, opt.ndf)
        self.netE = E_ResNet(opt.output_nc, opt.nz, opt.nef)
        self.criterionGAN = GANLoss(opt.gan_mode)
        self.criterionL1 = nn.L1Loss()
        self.criterionZ = nn.L1Loss()
        betas = (opt.beta1, 0.999)
        self.optimizer_G = torch.optim.Adam(self.netG.parameters(), lr=opt.lr, betas=betas)
        self.optimizer_E = torch.optim.Adam(self.netE.parameters(), lr=opt.lr, betas=betas)
        self.optimizer_D = torch.optim.Adam(self.netD.parameters(), lr=opt.lr, betas=betas)
        self.optimizer_D2 = torch.optim.Adam(self.netD2.parameters(), lr=opt.lr, betas=betas)
        self.optimizers = [self.optimizer_G, self.optimizer_E, self.optimizer_D, self.optimizer_D2]

    @staticmethod
    def set_requires_grad(nets, requires_grad=False):
        for net in nets if isinstance(nets, list) else [nets]:
            if net is not None:
                for p in net.parameters():
                    p.requires_grad = requires_grad

    def is_train(self):
        return self.opt.isTrain and self.real_A.size(0) == self.opt.batch_size

    def set_input(self, data):
        self.real_A, self.real_B = data["A"], data["B"]

    def get_z_random(self, batch_size, nz):
        return torch.randn(batch_size, nz)

    def encode(self, input_image):
        mu, logvar = self.netE(input_image)
        std = logvar.mul(0.5).exp_()
        eps = self.get_z_random(std.size(0), std.size(1))
        return eps.mul(std).add_(mu), mu, logvar

    def forward(self):
        half = self.opt.batch_size // 2
        self.real_A_encoded, self.real_B_encoded = self.real_A[:half], self.real_B[:half]
        self.real_A_random, self.real_B_random = self.real_A[half:], self.real_B[half:]
        self.z_encoded, self.mu, self.logvar = self.encode(self.real_B_encoded)
        self.z_random = self.get_z_random(self.real_A_encoded.size(0), self.opt.nz)
        self.fake_B_encoded = self.netG(self.real_A_encoded, self.z_encoded)
        self.fake_B_random = self.netG(self.real_A_encoded, self.z_random)
        self.fake_data_encoded, self.real_data_encoded = self.fake_B_encoded, self.real_B_encoded
        self.fake_data_random, self.real_data_random = self.fake_B_random, self.real_B_random
        if self.opt.lambda_z > 0.0:
            self.mu2, logvar2 = self.netE(self.fake_B_random)

    def backward_D(self, netD, real, fake):
        pred_fake = netD(fake.detach())
        pred_real = netD(real)
        loss_D_fake, _ = self.criterionGAN(pred_fake, False)
        loss_D_real, _ = self.criterionGAN(pred_real, True)
        loss_D = loss_D_fake + loss_D_real
        loss_D.backward()
        return loss_D, [loss_D_fake, loss_D_real]

    def backward_G_GAN(self, fake, netD=None, ll=0.0):
        if ll > 0.0:
            loss_G_GAN, _ = self.criterionGAN(netD(fake), True)
        else:
            loss_G_GAN = 0
        return loss_G_GAN * ll

    def backward_EG(self):
        self.loss_G_GAN = self.backward_G_GAN(self.fake_data_encoded, self.netD, self.opt.lambda_GAN)
        self.loss_G_GAN2 = self.backward_G_GAN(self.fake_data_random, self.netD2, self.opt.lambda_GAN2)
        if self.opt.lambda_kl > 0.0:
            self.loss_kl = torch.sum(1 + self.logvar - self.mu.pow(2) - self.logvar.exp()) * (-0.5 * self.opt.lambda_kl)
        else:
            self.loss_kl = 0
        self.loss_G_L1 = self.criterionL1(self.fake_B_encoded, self.real_B_encoded) * self.opt.lambda_L1
        self.loss_G = self.loss_G_GAN + self.loss_G_GAN2 + self.loss_G_L1 + self.loss_kl
        self.loss_G.backward(retain_graph=True)

    def update_D(self):
        self.set_requires_grad([self.netD, self.netD2], True)
        self.optimizer_D.zero_grad()
        self.loss_D, self.losses_D = self.backward_D(self.netD, self.real_data_encoded, self.fake_data_encoded)
        self.optimizer_D.step()
        self.optimizer_D2.zero_grad()
        self.loss_D2, self.losses_D2 = self.backward_D(self.netD2, self.real_data_random, self.fake_data_random)
        self.optimizer_D2.step()

    def backward_G_alone(self):
        # reconstruction |E(G(A, z_random)) - z_random|
        if self.opt.lambda_z > 0.0:
            self.loss_z_L1 = self.criterionZ(self.mu2, self.z_random) * self.opt.lambda_z
            self.loss_z_L1.backward()  # raises
        else:
            self.loss_z_L1 = 0.0

    def update_G_and_E(self):
        # update G and E
        self.set_requires_grad([self.netD, self.netD2], False)
        self.optimizer_E.zero_grad()
        self.optimizer_G.zero_grad()
        self.backward_EG()
        self.optimizer_G.step()
        self.optimizer_E.step()
        # update G alone
        if self.opt.lambda_z > 0.0:
            self.optimizer_G.zero_grad()
            self.optimizer_E.zero_grad()
            self.backward_G_alone()
            self.optimizer_G.step()

    def optimize_parameters(self):
        self.forward()
        self.update_G_and_E()
        self.update_D()

    def get_current_losses(self):
        out = OrderedDict()
        for name in self.loss_names:
            v = getattr(self, "loss_" + name, 0.0)
            out[name] = float(v.item()) if torch.is_tensor(v) else float(v)
        return out


def make_dataset(opt):
    g = torch.Generator().manual_seed(opt.seed)
    for _ in range(opt.iters_per_epoch):
        A = torch.rand(opt.batch_size, opt.input_nc, opt.fine_size, opt.fine_size, generator=g) * 2 - 1
        B = torch.tanh(A.flip(-1) + 0.1 * torch.randn(A.shape, generator=g))
        yield {"A": A, "B": B}


def main():
    opt = get_opt()
    torch.manual_seed(opt.seed)
    model = BiCycleGANModel(opt)
    total_steps = 0
    for epoch in range(opt.niter):
        for data in make_dataset(opt):
            model.set_input(data)
            if not model.is_train():
                continue
            model.optimize_parameters()
            total_steps += opt.batch_size
        losses = model.get_current_losses()
        print(f"(epoch: {epoch}, iters: {total_steps}) " + " ".join(f"{k}: {v:.3f}" for k, v in losses.items()))


if __name__ == "__main__":
    main()
