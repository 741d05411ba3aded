# expect: clean
# source: https://github.com/tamarott/SinGAN/issues/148
"""SinGAN: a pyramid of patch GANs learned from a single image (condensed).

Each scale trains a fully-convolutional WGAN-GP generator/discriminator pair;
generators of coarser scales are frozen and feed upsampled samples to the next
one. Reconstruction from a fixed noise map anchors the coarsest scale.
"""
import argparse
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

torch.manual_seed(0)
np.random.seed(0)


# ---------------------------------------------------------------- models
class ConvBlock(nn.Sequential):
    def __init__(self, in_channel, out_channel, ker_size, padd, stride):
        super().__init__()
        self.add_module('conv', nn.Conv2d(in_channel, out_channel, kernel_size=ker_size, stride=stride, padding=padd))
        self.add_module('norm', nn.BatchNorm2d(out_channel))
        self.add_module('LeakyRelu', nn.LeakyReLU(0.2, inplace=True))


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find('Conv2d') != -1:
        m.weight.data.normal_(0.0, 0.02)
    elif classname.find('Norm') != -1:
        m.weight.data.normal_(1.0, 0.02)
        m.bias.data.fill_(0)


class WDiscriminator(nn.Module):
    def __init__(self, opt):
        super().__init__()
        N = int(opt.nfc)
        self.head = ConvBlock(opt.nc_im, N, opt.ker_size, opt.padd_size, 1)
        self.body = nn.Sequential()
        for i in range(opt.num_layer - 2):
            N = int(opt.nfc / pow(2, (i + 1)))
            block = ConvBlock(max(2 * N, opt.min_nfc), max(N, opt.min_nfc), opt.ker_size, opt.padd_size, 1)
            self.body.add_module('block%d' % (i + 1), block)
        self.tail = nn.Conv2d(max(N, opt.min_nfc), 1, kernel_size=opt.ker_size, stride=1, padding=opt.padd_size)

    def forward(self, x):
        return self.tail(self.body(self.head(x)))


class GeneratorConcatSkip2CleanAdd(nn.Module):
    def __init__(self, opt):
        super().__init__()
        N = opt.nfc
        self.head = ConvBlock(opt.nc_im, N, opt.ker_size, opt.padd_size, 1)
        self.body = nn.Sequential()
        for i in range(opt.num_layer - 2):
            N = int(opt.nfc / pow(2, (i + 1)))
            block = ConvBlock(max(2 * N, opt.min_nfc), max(N, opt.min_nfc), opt.ker_size, opt.padd_size, 1)
            self.body.add_module('block%d' % (i + 1), block)
        self.tail = nn.Sequential(
            nn.Conv2d(max(N, opt.min_nfc), opt.nc_im, kernel_size=opt.ker_size, stride=1, padding=opt.padd_size),
            nn.Tanh())

    def forward(self, x, y):
        x = self.tail(self.body(self.head(x)))
        ind = int((y.shape[2] - x.shape[2]) / 2)
        y = y[:, :, ind:(y.shape[2] - ind), ind:(y.shape[3] - ind)]
        return x + y


# ---------------------------------------------------------------- functions
def generate_noise(size, num_samp=1, device='cpu', type='gaussian', scale=1):
    if type == 'gaussian':
        noise = torch.randn(num_samp, size[0], round(size[1] / scale), round(size[2] / scale), device=device)
        return F.interpolate(noise, size=(size[1], size[2]), mode='bilinear', align_corners=True)
    raise ValueError(type)


def calc_gradient_penalty(netD, real_data, fake_data, LAMBDA, device):
    alpha = torch.rand(1, 1).expand(real_data.size()).to(device)
    interpolates = alpha * real_data + ((1 - alpha) * fake_data)
    interpolates = torch.autograd.Variable(interpolates, requires_grad=True)
    disc_interpolates = netD(interpolates)
    gradients = torch.autograd.grad(outputs=disc_interpolates, inputs=interpolates,
                                    grad_outputs=torch.ones(disc_interpolates.size(), device=device),
                                    create_graph=True, retain_graph=True, only_inputs=True)[0]
    return ((gradients.norm(2, dim=1) - 1) ** 2).mean() * LAMBDA


def imresize(x, scale):
    h, w = max(1, round(x.shape[2] * scale)), max(1, round(x.shape[3] * scale))
    return F.interpolate(x, size=(h, w), mode='bicubic', align_corners=False)


def creat_reals_pyramid(real, opt):
    return [imresize(real, pow(opt.scale_factor, opt.stop_scale - i)) for i in range(opt.stop_scale + 1)]


def draw_concat(Gs, Zs, reals, NoiseAmp, in_s, mode, m_noise, m_image, opt):
    G_z = in_s
    if len(Gs) > 0:
        pad_noise = int(((opt.ker_size - 1) * opt.num_layer) / 2)
        for count, (G, Z_opt, real_curr, real_next, noise_amp) in enumerate(zip(Gs, Zs, reals, reals[1:], NoiseAmp)):
            if mode == 'rand':
                z = generate_noise([opt.nc_z, Z_opt.shape[2] - 2 * pad_noise, Z_opt.shape[3] - 2 * pad_noise])
                z = m_noise(z.expand(1, 3, z.shape[2], z.shape[3]) if count == 0 else z)
            else:
                z = Z_opt
            G_z = m_image(G_z[:, :, 0:real_curr.shape[2], 0:real_curr.shape[3]])
            z_in = noise_amp * z + G_z
            G_z = G(z_in.detach(), G_z)
            G_z = F.interpolate(G_z, size=real_next.shape[2:], mode='bicubic', align_corners=False)
    return G_z


def post_config(opt):
    opt.device = 'cpu'
    opt.niter_init = opt.niter
    opt.noise_amp_init = opt.noise_amp
    opt.nfc_init = opt.nfc
    opt.min_nfc_init = opt.min_nfc
    opt.scale_factor_init = opt.scale_factor
    return opt


def init_models(opt):
    netG = GeneratorConcatSkip2CleanAdd(opt)
    netG.apply(weights_init)
    netD = WDiscriminator(opt)
    netD.apply(weights_init)
    return netD, netG


# ---------------------------------------------------------------- training
def train_single_scale(netD, netG, reals, Gs, Zs, in_s, NoiseAmp, opt):
    real = reals[len(Gs)]
    opt.nzx, opt.nzy = real.shape[2], real.shape[3]
    pad_noise = int(((opt.ker_size - 1) * opt.num_layer) / 2)
    pad_image = int(((opt.ker_size - 1) * opt.num_layer) / 2)
    m_noise = nn.ZeroPad2d(int(pad_noise))
    m_image = nn.ZeroPad2d(int(pad_image))
    alpha = opt.alpha

    fixed_noise = generate_noise([opt.nc_z, opt.nzx, opt.nzy], device=opt.device)
    z_opt = m_noise(torch.full(fixed_noise.shape, 0., device=opt.device))

    optimizerD = optim.Adam(netD.parameters(), lr=opt.lr_d, betas=(opt.beta1, 0.999))
    optimizerG = optim.Adam(netG.parameters(), lr=opt.lr_g, betas=(opt.beta1, 0.999))
    schedulerD = torch.optim.lr_scheduler.MultiStepLR(optimizer=optimizerD, milestones=[1600], gamma=opt.gamma)
    schedulerG = torch.optim.lr_scheduler.MultiStepLR(optimizer=optimizerG, milestones=[1600], gamma=opt.gamma)

    for epoch in range(opt.niter):
        if Gs == []:
            z_opt = generate_noise([1, opt.nzx, opt.nzy], device=opt.device)
            z_opt = m_noise(z_opt.expand(1, 3, opt.nzx, opt.nzy))
            noise_ = generate_noise([1, opt.nzx, opt.nzy], device=opt.device)
            noise_ = m_noise(noise_.expand(1, 3, opt.nzx, opt.nzy))
        else:
            noise_ = m_noise(generate_noise([opt.nc_z, opt.nzx, opt.nzy], device=opt.device))

        # (1) Update D network: maximize D(x) + D(G(z))
        for j in range(opt.Dsteps):
            netD.zero_grad()
            output = netD(real)
            errD_real = -output.mean()
            errD_real.backward(retain_graph=True)

            if (j == 0) & (epoch == 0):
                if Gs == []:
                    prev = torch.full([1, opt.nc_z, opt.nzx, opt.nzy], 0., device=opt.device)
                    in_s = prev
                    prev = m_image(prev)
                    z_prev = m_noise(torch.full([1, opt.nc_z, opt.nzx, opt.nzy], 0., device=opt.device))
                    opt.noise_amp = 1
                else:
                    prev = m_image(draw_concat(Gs, Zs, reals, NoiseAmp, in_s, 'rand', m_noise, m_image, opt))
                    z_prev = m_image(draw_concat(Gs, Zs, reals, NoiseAmp, in_s, 'rec', m_noise, m_image, opt))
                    RMSE = torch.sqrt(F.mse_loss(real, z_prev[:, :, pad_image:-pad_image, pad_image:-pad_image]))
                    opt.noise_amp = opt.noise_amp_init * RMSE
            else:
                prev = m_image(draw_concat(Gs, Zs, reals, NoiseAmp, in_s, 'rand', m_noise, m_image, opt))

            noise = noise_ if Gs == [] else opt.noise_amp * noise_ + prev

            fake = netG(noise.detach(), prev)
            output = netD(fake.detach())
            errD_fake = output.mean()
            errD_fake.backward(retain_graph=True)

            gradient_penalty = calc_gradient_penalty(netD, real, fake, opt.lambda_grad, opt.device)
            gradient_penalty.backward()

            errD = errD_real + errD_fake + gradient_penalty
            optimizerD.step()

        # (2) Update G network: maximize D(G(z))
        for j in range(opt.Gsteps):
            netG.zero_grad()
            fake = netG(noise.detach(), prev)
            output = netD(fake)
            errG = -output.mean()
            errG.backward(retain_graph=True)
            if alpha != 0:
                Z_opt = opt.noise_amp * z_opt + z_prev
                rec_loss = alpha * F.mse_loss(netG(Z_opt.detach(), z_prev), real)
                rec_loss.backward(retain_graph=True)
                rec_loss = rec_loss.detach()
            else:
                Z_opt = z_opt
                rec_loss = 0
            optimizerG.step()

        if epoch % 5 == 0 or epoch == (opt.niter - 1):
            print('scale %d:[%d/%d] errD %.3f errG %.3f rec %.4f' % (len(Gs), epoch, opt.niter,
                                                                     errD.item(), errG.item(), float(rec_loss)))
        schedulerD.step()
        schedulerG.step()
    return z_opt, in_s, netG


def train(opt, Gs, Zs, reals, NoiseAmp, real):
    in_s = 0
    reals = creat_reals_pyramid(real, opt)
    nfc_prev = 0
    for scale_num in range(opt.stop_scale + 1):
        opt.nfc = min(opt.nfc_init * pow(2, math.floor(scale_num / 4)), 128)
        opt.min_nfc = min(opt.min_nfc_init * pow(2, math.floor(scale_num / 4)), 128)
        D_curr, G_curr = init_models(opt)
        if nfc_prev == opt.nfc:
            G_curr.load_state_dict(Gs[-1].state_dict())
        z_curr, in_s, G_curr = train_single_scale(D_curr, G_curr, reals, Gs, Zs, in_s, NoiseAmp, opt)
        G_curr.requires_grad_(False)
        G_curr.eval()
        Gs.append(G_curr)
        Zs.append(z_curr)
        NoiseAmp.append(opt.noise_amp)
        nfc_prev = opt.nfc
    return Gs, Zs, NoiseAmp


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--nc_z', type=int, default=3)
    parser.add_argument('--nc_im', type=int, default=3)
    parser.add_argument('--nfc', type=int, default=16)
    parser.add_argument('--min_nfc', type=int, default=16)
    parser.add_argument('--ker_size', type=int, default=3)
    parser.add_argument('--num_layer', type=int, default=3)
    parser.add_argument('--padd_size', type=int, default=0)
    parser.add_argument('--scale_factor', type=float, default=0.75)
    parser.add_argument('--noise_amp', type=float, default=0.1)
    parser.add_argument('--stop_scale', type=int, default=2)
    parser.add_argument('--niter', type=int, default=6)
    parser.add_argument('--gamma', type=float, default=0.1)
    parser.add_argument('--lr_g', type=float, default=0.0005)
    parser.add_argument('--lr_d', type=float, default=0.0005)
    parser.add_argument('--beta1', type=float, default=0.5)
    parser.add_argument('--Gsteps', type=int, default=3)
    parser.add_argument('--Dsteps', type=int, default=3)
    parser.add_argument('--lambda_grad', type=float, default=0.1)
    parser.add_argument('--alpha', type=float, default=10)
    opt = post_config(parser.parse_args([]))
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, 28), torch.linspace(-1, 1, 28), indexing='ij')
    real = torch.stack([torch.sin(6 * xx), torch.cos(5 * yy), torch.sin(4 * (xx + yy))]).unsqueeze(0) * 0.8
    Gs, Zs, NoiseAmp = train(opt, [], [], [], [], real)
    print('trained %d scales; noise amps %s' % (len(Gs), [round(float(a), 4) for a in NoiseAmp]))


main()
