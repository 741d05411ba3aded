# expect: clean
# source: https://github.com/yiranran/APDrawingGAN/issues/22
"""Portrait-to-line-drawing GAN in the style of APDrawingGAN (pix2pix code base):
argparse options, a ``BaseModel`` with scheduler setup / ``set_requires_grad`` /
loss reporting, generator and PatchGAN discriminator factories, an LSGAN
criterion, an image pool, frozen distance-transform and line-detector networks,
and ``APDrawingGANModel`` with ``backward_D`` / ``backward_G`` including the two
chamfer-matching terms.  The run is a loss-ablation experiment whose generator
objective is assembled from the loss terms named in the options.
"""
import argparse
import random

import torch
import torch.nn as nn


def get_option_parser():
    parser = argparse.ArgumentParser()
    parser.add_argument("--input_nc", type=int, default=3)
    parser.add_argument("--output_nc", type=int, default=1)
    parser.add_argument("--ngf", type=int, default=8)
    parser.add_argument("--ndf", type=int, default=8)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--beta1", type=float, default=0.5)
    parser.add_argument("--niter", type=int, default=2)
    parser.add_argument("--niter_decay", type=int, default=2)
    parser.add_argument("--pool_size", type=int, default=4)
    parser.add_argument("--lambda_L1", type=float, default=100.0)
    parser.add_argument("--lambda_chamfer", type=float, default=0.1)
    parser.add_argument("--lambda_chamfer2", type=float, default=0.1)
    parser.add_argument("--no_l1_loss", action="store_true")
    parser.add_argument("--g_loss_terms", type=str, default="G_GAN,G_L1,G_chamfer,G_chamfer2")
    parser.add_argument("--which_direction", type=str, default="AtoB")
    return parser


class ImagePool:
    def __init__(self, pool_size):
        self.pool_size = pool_size
        self.images = []

    def query(self, images):
        if self.pool_size == 0:
            return images
        out = []
        for image in images:
            image = image.unsqueeze(0)
            if len(self.images) < self.pool_size:
                self.images.append(image)
                out.append(image)
            elif random.uniform(0, 1) > 0.5:
                idx = random.randint(0, self.pool_size - 1)
                tmp = self.images[idx].clone()
                self.images[idx] = image
                out.append(tmp)
            else:
                out.append(image)
        return torch.cat(out, 0)


class GANLoss(nn.Module):
    def __init__(self, target_real_label=1.0, target_fake_label=0.0):
        super().__init__()
        self.register_buffer("real_label", torch.tensor(target_real_label))
        self.register_buffer("fake_label", torch.tensor(target_fake_label))
        self.loss = nn.MSELoss()

    def __call__(self, prediction, target_is_real):
        target = self.real_label if target_is_real else self.fake_label
        return self.loss(prediction, target.expand_as(prediction))


class SmallUnetGenerator(nn.Module):
    def __init__(self, input_nc, output_nc, ngf):
        super().__init__()
        self.down1 = nn.Sequential(nn.Conv2d(input_nc, ngf, 4, 2, 1), nn.LeakyReLU(0.2))
        self.down2 = nn.Sequential(nn.Conv2d(ngf, ngf * 2, 4, 2, 1), nn.InstanceNorm2d(ngf * 2),
                                   nn.LeakyReLU(0.2))
        self.up2 = nn.Sequential(nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1),
                                 nn.InstanceNorm2d(ngf), nn.ReLU())
        self.up1 = nn.Sequential(nn.ConvTranspose2d(ngf * 2, output_nc, 4, 2, 1), nn.Tanh())

    def forward(self, x):
        d1 = self.down1(x)
        d2 = self.down2(d1)
        u2 = self.up2(d2)
        return self.up1(torch.cat([u2, d1], 1))


class NLayerDiscriminator(nn.Module):
    def __init__(self, input_nc, ndf, n_layers=2):
        super().__init__()
        seq = [nn.Conv2d(input_nc, ndf, 4, 2, 1), nn.LeakyReLU(0.2, True)]
        mult = 1
        for n in range(1, n_layers):
            seq += [nn.Conv2d(ndf * mult, ndf * mult * 2, 4, 2, 1),
                    nn.InstanceNorm2d(ndf * mult * 2), nn.LeakyReLU(0.2, True)]
            mult *= 2
        seq += [nn.Conv2d(ndf * mult, 1, 3, 1, 1)]
        self.model = nn.Sequential(*seq)

    def forward(self, x):
        return self.model(x)


def define_G(input_nc, output_nc, ngf):
    net = SmallUnetGenerator(input_nc, output_nc, ngf)
    for m in net.modules():
        if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
            nn.init.normal_(m.weight, 0.0, 0.02)
    return net


class BaseModel:
    def __init__(self, opt):
        self.opt = opt
        self.isTrain = True
        self.loss_names, self.model_names, self.optimizers = [], [], []

    def setup(self):
        def lambda_rule(epoch):
            return 1.0 - max(0, epoch + 1 - self.opt.niter) / float(self.opt.niter_decay + 1)
        self.schedulers = [torch.optim.lr_scheduler.LambdaLR(o, lr_lambda=lambda_rule)
                           for o in self.optimizers]

    def set_requires_grad(self, nets, requires_grad=False):
        if not isinstance(nets, list):
            nets = [nets]
        for net in nets:
            if net is not None:
                for param in net.parameters():
                    param.requires_grad = requires_grad

    def update_learning_rate(self):
        for scheduler in self.schedulers:
            scheduler.step()
        return self.optimizers[0].param_groups[0]["lr"]

    def get_current_losses(self):
        return {name: float(getattr(self, "loss_" + name)) for name in self.loss_names}


class APDrawingGANModel(BaseModel):
    def __init__(self, opt):
        super().__init__(opt)
        self.loss_names = [n for n in opt.g_loss_terms.split(",") if n] + ["D_real", "D_fake"]
        self.netG = define_G(opt.input_nc, opt.output_nc, opt.ngf)
        self.netD = NLayerDiscriminator(opt.input_nc + opt.output_nc, opt.ndf)
        # pretrained distance-transform / line-detector nets, kept frozen
        self.netDT1 = define_G(1, 1, opt.ngf)
        self.netDT2 = define_G(1, 1, opt.ngf)
        self.netLine1 = define_G(1, 1, opt.ngf)
        self.netLine2 = define_G(1, 1, opt.ngf)
        self.set_requires_grad([self.netDT1, self.netDT2, self.netLine1, self.netLine2], False)
        self.fake_AB_pool = ImagePool(opt.pool_size)
        self.criterionGAN = GANLoss()
        self.criterionL1 = nn.L1Loss()
        self.optimizer_G = torch.optim.Adam(self.netG.parameters(), lr=opt.lr,
                                            betas=(opt.beta1, 0.999))
        self.optimizer_D = torch.optim.Adam(self.netD.parameters(), lr=opt.lr,
                                            betas=(opt.beta1, 0.999))
        self.optimizers = [self.optimizer_G, self.optimizer_D]

    def set_input(self, input):
        AtoB = self.opt.which_direction == "AtoB"
        self.real_A = input["A" if AtoB else "B"]
        self.real_B = input["B" if AtoB else "A"]
        self.dt1gt = input["dt1gt"]
        self.dt2gt = input["dt2gt"]

    def forward(self):
        self.fake_B = self.netG(self.real_A)

    def backward_D(self):
        fake_AB = self.fake_AB_pool.query(torch.cat((self.real_A, self.fake_B), 1))
        self.loss_D_fake = self.criterionGAN(self.netD(fake_AB.detach()), False)
        real_AB = torch.cat((self.real_A, self.real_B), 1)
        self.loss_D_real = self.criterionGAN(self.netD(real_AB), True)
        self.loss_D = (self.loss_D_fake + self.loss_D_real) * 0.5
        self.loss_D.backward()

    def backward_G(self):
        fake_AB = torch.cat((self.real_A, self.fake_B), 1)
        self.loss_G_GAN = self.criterionGAN(self.netD(fake_AB), True)
        if not self.opt.no_l1_loss:
            self.loss_G_L1 = self.criterionL1(self.fake_B, self.real_B) * self.opt.lambda_L1
        fake_B_gray, real_B_gray = self.fake_B, self.real_B
        bs = real_B_gray.shape[0]
        # d_CM(a_i, G(p_i))
        dt1 = self.netDT1(fake_B_gray) / 2.0 + 0.5
        dt2 = self.netDT2(fake_B_gray) / 2.0 + 0.5
        real_B_gray_line1 = self.netLine1(real_B_gray)
        real_B_gray_line2 = self.netLine2(real_B_gray)
        self.loss_G_chamfer = (dt1[(real_B_gray < 0) & (real_B_gray_line1 < 0)].sum()
                               + dt2[(real_B_gray >= 0) & (real_B_gray_line2 >= 0)].sum()
                               ) / bs * self.opt.lambda_chamfer
        # d_CM(G(p_i), a_i)
        dt1gt, dt2gt = self.dt1gt, self.dt2gt
        fake_B_gray_line1 = self.netLine1(fake_B_gray)
        fake_B_gray_line2 = self.netLine2(fake_B_gray)
        self.loss_G_chamfer2 = (dt1gt[(fake_B_gray < 0) & (fake_B_gray_line1 < 0)].sum()
                                + dt2gt[(fake_B_gray >= 0) & (fake_B_gray_line2 >= 0)].sum()
                                ) / bs * self.opt.lambda_chamfer2
        g_terms = [n for n in self.loss_names if n.startswith("G_")]
        self.loss_G = getattr(self, "loss_" + g_terms[0])
        for name in g_terms[1:]:
            self.loss_G = self.loss_G + getattr(self, "loss_" + name)
        self.loss_G.backward()

    def optimize_parameters(self):
        self.forward()
        self.set_requires_grad(self.netD, True)
        self.optimizer_D.zero_grad()
        self.backward_D()
        self.optimizer_D.step()
        self.set_requires_grad(self.netD, False)
        self.optimizer_G.zero_grad()
        self.backward_G()
        self.optimizer_G.step()


def make_dataset(n, size=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    data = []
    for _ in range(n):
        A = torch.rand(1, 3, size, size, generator=g) * 2 - 1
        B = torch.where(A.mean(1, keepdim=True) > 0, torch.ones(1, 1, size, size),
                        -torch.ones(1, 1, size, size))
        dt1gt = torch.rand(1, 1, size, size, generator=g)
        dt2gt = torch.rand(1, 1, size, size, generator=g)
        data.append({"A": A, "B": B, "dt1gt": dt1gt, "dt2gt": dt2gt})
    return data


def main():
    random.seed(0)
    torch.manual_seed(0)
    # loss ablation run
    opt = get_option_parser().parse_args(["--g_loss_terms", "G_GAN,G_chamfer2", "--no_l1_loss"])
    model = APDrawingGANModel(opt)
    model.setup()
    dataset = make_dataset(6)
    for epoch in range(opt.niter + opt.niter_decay):
        for i, data in enumerate(dataset):
            model.set_input(data)
            model.optimize_parameters()
        lr = model.update_learning_rate()
        losses = model.get_current_losses()
        print("epoch %d lr %.6f " % (epoch, lr)
              + " ".join("%s: %.3f" % (k, v) for k, v in losses.items()))


if __name__ == "__main__":
    main()
