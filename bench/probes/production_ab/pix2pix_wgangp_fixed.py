# expect: clean
# source: https://github.com/junyanz/pytorch-CycleGAN-and-pix2pix/issues/439
"""Conditional image-to-image GAN (pix2pix layout) trained with the WGAN-GP objective.

Mirrors the pix2pix code base: an options namespace, a BaseModel with
set_requires_grad / schedulers / get_current_losses, a Pix2PixModel with
set_input / forward / backward_D / backward_G / optimize_parameters, a GANLoss
class, the cal_gradient_penalty helper from networks.py, and a small training
driver with a loss-logging callback.  The critic is updated several times per
generator update, as is usual for WGAN-GP.  Synthetic paired images on CPU.
"""
import argparse
from collections import OrderedDict

import torch
import torch.nn as nn
from torch.optim import lr_scheduler


# ----------------------------------------------------------------------------- networks.py
class UnetSkipBlock(nn.Module):
    def __init__(self, outer_nc, inner_nc, submodule=None, outermost=False):
        super().__init__()
        self.outermost = outermost
        down = [nn.LeakyReLU(0.2), nn.Conv2d(outer_nc, inner_nc, 4, 2, 1)]
        up_in = inner_nc * 2 if submodule is not None else inner_nc
        up = [nn.ReLU(), nn.ConvTranspose2d(up_in, outer_nc, 4, 2, 1)]
        if outermost:
            down = [nn.Conv2d(outer_nc, inner_nc, 4, 2, 1)]
            up = up + [nn.Tanh()]
        layers = down + ([submodule] if submodule is not None else []) + up
        self.model = nn.Sequential(*layers)

    def forward(self, x):
        if self.outermost:
            return self.model(x)
        return torch.cat([x, self.model(x)], 1)


class UnetGenerator(nn.Module):
    def __init__(self, input_nc, output_nc, ngf=8):
        super().__init__()
        block = UnetSkipBlock(ngf * 2, ngf * 4)
        block = UnetSkipBlock(ngf, ngf * 2, submodule=block)
        self.model = UnetSkipBlock(input_nc, ngf, submodule=block, outermost=True)
        self.to_out = nn.Conv2d(input_nc, output_nc, 1)

    def forward(self, x):
        return self.to_out(self.model(x))


class NLayerDiscriminator(nn.Module):
    def __init__(self, input_nc, ndf=8, n_layers=2):
        super().__init__()
        seq = [nn.Conv2d(input_nc, ndf, 4, 2, 1), nn.LeakyReLU(0.2)]
        mult = 1
        for n in range(1, n_layers):
            seq += [nn.Conv2d(ndf * mult, ndf * mult * 2, 4, 2, 1), nn.LeakyReLU(0.2)]
            mult *= 2
        seq += [nn.Conv2d(ndf * mult, 1, 3, 1, 1)]
        self.model = nn.Sequential(*seq)

    def forward(self, x):
        return self.model(x)


class GANLoss(nn.Module):
    def __init__(self, gan_mode):
        super().__init__()
        self.gan_mode = gan_mode
        if gan_mode == "lsgan":
            self.loss = nn.MSELoss()
        elif gan_mode == "vanilla":
            self.loss = nn.BCEWithLogitsLoss()
        else:
            self.loss = None

    def __call__(self, prediction, target_is_real):
        if self.gan_mode == "wgangp":
            return -prediction.mean() if target_is_real else prediction.mean()
        target = torch.ones_like(prediction) if target_is_real else torch.zeros_like(prediction)
        return self.loss(prediction, target)


def cal_gradient_penalty(netD, real_data, fake_data, device, type="mixed", constant=1.0, lambda_gp=10.0):
    """Gradient penalty of WGAN-GP (Gulrajani et al.), as in networks.py."""
    if lambda_gp <= 0.0:
        return 0.0, None
    if type == "real":
        interpolatesv = real_data
    elif type == "fake":
        interpolatesv = fake_data
    else:
        alpha = torch.rand(real_data.shape[0], 1, device=device)
        alpha = alpha.expand(real_data.shape[0], real_data.nelement() // real_data.shape[0])
        alpha = alpha.contiguous().view(*real_data.shape)
        interpolatesv = alpha * real_data + ((1 - alpha) * fake_data)
    interpolatesv.requires_grad_(True)
    disc_interpolates = netD(interpolatesv)
    gradients = torch.autograd.grad(outputs=disc_interpolates, inputs=interpolatesv,
                                    grad_outputs=torch.ones(disc_interpolates.size(), device=device),
                                    create_graph=True, retain_graph=True, only_inputs=True)
    gradients = gradients[0].view(real_data.size(0), -1)
    gradient_penalty = (((gradients + 1e-16).norm(2, dim=1) - constant) ** 2).mean() * lambda_gp
    return gradient_penalty, gradients


def get_scheduler(optimizer, opt):
    def lambda_rule(epoch):
        return 1.0 - max(0, epoch + opt.epoch_count - opt.n_epochs) / float(opt.n_epochs_decay + 1)
    return lr_scheduler.LambdaLR(optimizer, lr_lambda=lambda_rule)


# ----------------------------------------------------------------------------- base_model.py
class BaseModel:
    def __init__(self, opt):
        self.opt = opt
        self.device = torch.device("cpu")
        self.loss_names, self.model_names, self.optimizers = [], [], []

    def setup(self, opt):
        self.schedulers = [get_scheduler(o, opt) for o in self.optimizers]

    @staticmethod
    def set_requires_grad(nets, requires_grad=False):
        nets = nets if isinstance(nets, list) else [nets]
        for net in nets:
            if net is not None:
                for param in net.parameters():
                    param.requires_grad = requires_grad

    def update_learning_rate(self):
        for scheduler in self.schedulers:
            scheduler.step()
        return self.optimizers[0].param_groups[0]["lr"]

    def get_current_losses(self):
        return OrderedDict((n, float(getattr(self, "loss_" + n))) for n in self.loss_names)


# ----------------------------------------------------------------------------- pix2pix_model.py
class Pix2PixModel(BaseModel):
    def __init__(self, opt):
        super().__init__(opt)
        self.loss_names = ["G_GAN", "G_L1", "D_real", "D_fake", "gp"]
        self.netG = UnetGenerator(opt.input_nc, opt.output_nc, opt.ngf)
        self.netD = NLayerDiscriminator(opt.input_nc + opt.output_nc, opt.ndf, opt.n_layers_D)
        self.criterionGAN = GANLoss(opt.gan_mode)
        self.criterionL1 = nn.L1Loss()
        self.optimizer_G = torch.optim.Adam(self.netG.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))
        self.optimizer_D = torch.optim.Adam(self.netD.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))
        self.optimizers = [self.optimizer_G, self.optimizer_D]
        self.L_GP = opt.lambda_gp

    def set_input(self, data):
        self.real_A = data["A"].to(self.device)
        self.real_B = data["B"].to(self.device)

    def forward(self):
        self.fake_B = self.netG(self.real_A)

    def backward_D(self):
        """Calculate GAN loss for the discriminator"""
        # Fake; stop backprop to the generator by detaching fake_B
        fake_AB = torch.cat((self.real_A, self.fake_B), 1)
        pred_fake = self.netD(fake_AB.detach())
        self.loss_D_fake = self.criterionGAN(pred_fake, False)
        # Real
        real_AB = torch.cat((self.real_A, self.real_B), 1)
        pred_real = self.netD(real_AB)
        self.loss_D_real = self.criterionGAN(pred_real, True)
        # gradient penalty
        self.loss_gp, self.gradients = cal_gradient_penalty(self.netD, real_AB, fake_AB.detach(), self.device,
                                                            lambda_gp=self.L_GP)
        self.loss_D = self.loss_D_fake + self.loss_D_real + self.loss_gp
        self.loss_D.backward()

    def backward_G(self):
        fake_AB = torch.cat((self.real_A, self.fake_B), 1)
        pred_fake = self.netD(fake_AB)
        self.loss_G_GAN = self.criterionGAN(pred_fake, True)
        self.loss_G_L1 = self.criterionL1(self.fake_B, self.real_B) * self.opt.lambda_L1
        self.loss_G = self.loss_G_GAN + self.loss_G_L1
        self.loss_G.backward()

    def optimize_parameters(self):
        self.forward()                   # compute fake images: G(A)
        # update D (several critic steps per generator step)
        self.set_requires_grad(self.netD, True)
        for _ in range(self.opt.n_critic):
            self.optimizer_D.zero_grad()
            self.backward_D()
            self.optimizer_D.step()
        # update G
        self.set_requires_grad(self.netD, False)
        self.optimizer_G.zero_grad()
        self.backward_G()
        self.optimizer_G.step()


# ----------------------------------------------------------------------------- train.py
class LossLogger:
    def __init__(self, print_freq):
        self.print_freq = print_freq
        self.history = []

    def on_iter_end(self, total_iters, model):
        losses = model.get_current_losses()
        self.history.append(losses)
        if total_iters % self.print_freq == 0:
            print("iters %d  " % total_iters + "  ".join("%s: %.3f" % kv for kv in losses.items()))


def make_dataset(opt, n_batches):
    g = torch.Generator().manual_seed(0)
    for _ in range(n_batches):
        A = torch.rand(opt.batch_size, opt.input_nc, opt.crop_size, opt.crop_size, generator=g) * 2 - 1
        B = torch.tanh(A.flip(-1) * 1.5)
        yield {"A": A, "B": B}


def parse_opt():
    p = argparse.ArgumentParser()
    p.add_argument("--input_nc", type=int, default=3)
    p.add_argument("--output_nc", type=int, default=3)
    p.add_argument("--ngf", type=int, default=8)
    p.add_argument("--ndf", type=int, default=8)
    p.add_argument("--n_layers_D", type=int, default=2)
    p.add_argument("--gan_mode", type=str, default="wgangp")
    p.add_argument("--lambda_L1", type=float, default=100.0)
    p.add_argument("--lambda_gp", type=float, default=10.0)
    p.add_argument("--n_critic", type=int, default=3)
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--beta1", type=float, default=0.5)
    p.add_argument("--batch_size", type=int, default=2)
    p.add_argument("--crop_size", type=int, default=16)
    p.add_argument("--n_epochs", type=int, default=2)
    p.add_argument("--n_epochs_decay", type=int, default=2)
    p.add_argument("--epoch_count", type=int, default=1)
    p.add_argument("--print_freq", type=int, default=2)
    return p.parse_args([])


def main():
    torch.manual_seed(0)
    opt = parse_opt()
    model = Pix2PixModel(opt)
    model.setup(opt)
    logger = LossLogger(opt.print_freq)
    total_iters = 0
    for epoch in range(opt.epoch_count, opt.n_epochs + opt.n_epochs_decay + 1):
        for data in make_dataset(opt, n_batches=2):
            total_iters += 1
            model.set_input(data)
            model.optimize_parameters()
            logger.on_iter_end(total_iters, model)
        lr = model.update_learning_rate()
        print("end of epoch %d, lr %.6f" % (epoch, lr))


if __name__ == "__main__":
    main()
