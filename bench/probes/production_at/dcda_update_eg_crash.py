# expect: inplace_version
# source: https://github.com/lkpengcs/DCDA/issues/2
"""Disentangled cross-domain adaptation (DRIT++-style) training, miniature.

Content / attribute encoders, a two-branch generator, image and content
discriminators, one Adam optimizer per sub-network, step schedulers, and the
`update_D_content` / `update_D` / `update_EG` update schedule driven from
`main()`.  Grayscale synthetic images, CPU only.
"""
import argparse

import numpy as np
import torch
import torch.nn as nn

def gaussian_weights_init(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1 and classname.find("Conv") == 0:
        m.weight.data.normal_(0.0, 0.02)

def get_scheduler(optimizer, opts, cur_ep=-1):
    return torch.optim.lr_scheduler.StepLR(optimizer, step_size=opts.n_ep_decay, gamma=0.5, last_epoch=cur_ep)

class Dis(nn.Module):
    def __init__(self, input_dim, ch=8):
        super().__init__()
        self.model = nn.Sequential(
            nn.Conv2d(input_dim, ch, 4, 2, 1), nn.LeakyReLU(0.2),
            nn.Conv2d(ch, 2 * ch, 4, 2, 1), nn.LeakyReLU(0.2),
            nn.Conv2d(2 * ch, 1, 1, 1, 0),
        )
    def forward(self, x):
        out = self.model(x).view(-1)
        return [out]

class Dis_content(nn.Module):
    def __init__(self, ch=16):
        super().__init__()
        self.model = nn.Sequential(
            nn.Conv2d(ch, ch, 3, 2, 1), nn.LeakyReLU(0.2),
            nn.AdaptiveAvgPool2d(1), nn.Conv2d(ch, 1, 1),
        )
    def forward(self, x):
        return [self.model(x).view(-1)]

class E_content(nn.Module):
    def __init__(self, input_dim_a, input_dim_b, ch=16):
        super().__init__()
        self.convA = nn.Sequential(nn.Conv2d(input_dim_a, ch, 3, 1, 1), nn.InstanceNorm2d(ch), nn.ReLU())
        self.convB = nn.Sequential(nn.Conv2d(input_dim_b, ch, 3, 1, 1), nn.InstanceNorm2d(ch), nn.ReLU())
        self.conv_share = nn.Sequential(nn.Conv2d(ch, ch, 3, 2, 1), nn.InstanceNorm2d(ch), nn.ReLU())
    def forward(self, xa, xb):
        return self.forward_a(xa), self.forward_b(xb)
    def forward_a(self, xa):
        return self.conv_share(self.convA(xa))
    def forward_b(self, xb):
        return self.conv_share(self.convB(xb))

class E_attr(nn.Module):
    def __init__(self, input_dim_a, input_dim_b, output_nc=8, ch=8):
        super().__init__()
        def branch(dim):
            return nn.Sequential(nn.Conv2d(dim, ch, 4, 2, 1), nn.ReLU(),
                                 nn.Conv2d(ch, 2 * ch, 4, 2, 1), nn.ReLU(),
                                 nn.AdaptiveAvgPool2d(1), nn.Conv2d(2 * ch, output_nc, 1))
        self.model_a = branch(input_dim_a)
        self.model_b = branch(input_dim_b)
    def forward(self, xa, xb):
        return self.model_a(xa).view(xa.size(0), -1), self.model_b(xb).view(xb.size(0), -1)

class G(nn.Module):
    def __init__(self, output_dim_a, output_dim_b, nz, ch=16):
        super().__init__()
        self.nz = nz
        self.mlpA = nn.Sequential(nn.Linear(nz, 32), nn.ReLU(), nn.Linear(32, ch * 2))
        self.mlpB = nn.Sequential(nn.Linear(nz, 32), nn.ReLU(), nn.Linear(32, ch * 2))
        self.decA = nn.Sequential(nn.ConvTranspose2d(ch, ch, 4, 2, 1), nn.ReLU(), nn.Conv2d(ch, output_dim_a, 3, 1, 1), nn.Tanh())
        self.decB = nn.Sequential(nn.ConvTranspose2d(ch, ch, 4, 2, 1), nn.ReLU(), nn.Conv2d(ch, output_dim_b, 3, 1, 1), nn.Tanh())
    @staticmethod
    def _modulate(x, params):
        gamma, beta = params.chunk(2, dim=1)
        return x * (1 + gamma[:, :, None, None]) + beta[:, :, None, None]
    def forward_a(self, x, z):
        return self.decA(self._modulate(x, self.mlpA(z)))
    def forward_b(self, x, z):
        return self.decB(self._modulate(x, self.mlpB(z)))

class DCDA(nn.Module):
    def __init__(self, opts):
        super().__init__()
        lr = 0.0001
        lr_dcontent = lr / 2.5
        self.nz = 8
        self.disA = Dis(opts.input_dim_a)
        self.disB = Dis(opts.input_dim_b)
        self.disA2 = Dis(opts.input_dim_a)
        self.disB2 = Dis(opts.input_dim_b)
        self.disContent = Dis_content()
        self.enc_c = E_content(opts.input_dim_a, opts.input_dim_b)
        self.enc_a = E_attr(opts.input_dim_a, opts.input_dim_b, self.nz)
        self.gen = G(opts.input_dim_a, opts.input_dim_b, nz=self.nz)

        adam = lambda m, lr_: torch.optim.Adam(m.parameters(), lr=lr_, betas=(0.5, 0.999), weight_decay=0.0001)
        self.disA_opt = adam(self.disA, lr)
        self.disB_opt = adam(self.disB, lr)
        self.disA2_opt = adam(self.disA2, lr)
        self.disB2_opt = adam(self.disB2, lr)
        self.disContent_opt = adam(self.disContent, lr_dcontent)
        self.enc_c_opt = adam(self.enc_c, lr)
        self.enc_a_opt = adam(self.enc_a, lr)
        self.gen_opt = adam(self.gen, lr)
        self.criterionL1 = nn.L1Loss()
    def initialize(self):
        for net in (self.disA, self.disB, self.disA2, self.disB2, self.disContent, self.gen, self.enc_c, self.enc_a):
            net.apply(gaussian_weights_init)
    def set_scheduler(self, opts, last_ep=0):
        self.schedulers = [get_scheduler(o, opts, last_ep) for o in (
            self.disA_opt, self.disB_opt, self.disA2_opt, self.disB2_opt,
            self.disContent_opt, self.enc_c_opt, self.enc_a_opt, self.gen_opt)]
    def get_z_random(self, batchSize, nz):
        return torch.randn(batchSize, nz)
    def forward(self, half_size=1):
        real_A, real_B = self.input_A, self.input_B
        self.real_A_encoded, self.real_A_random = real_A[0:half_size], real_A[half_size:]
        self.real_B_encoded, self.real_B_random = real_B[0:half_size], real_B[half_size:]

        self.z_content_a, self.z_content_b = self.enc_c.forward(self.real_A_encoded, self.real_B_encoded)
        self.z_attr_a, self.z_attr_b = self.enc_a.forward(self.real_A_encoded, self.real_B_encoded)
        self.z_random = self.get_z_random(self.real_A_encoded.size(0), self.nz)

        input_content_forA = torch.cat((self.z_content_b, self.z_content_a, self.z_content_b), 0)
        input_content_forB = torch.cat((self.z_content_a, self.z_content_b, self.z_content_a), 0)
        input_attr_forA = torch.cat((self.z_attr_a, self.z_attr_a, self.z_random), 0)
        input_attr_forB = torch.cat((self.z_attr_b, self.z_attr_b, self.z_random), 0)
        output_fakeA = self.gen.forward_a(input_content_forA, input_attr_forA)
        output_fakeB = self.gen.forward_b(input_content_forB, input_attr_forB)
        self.fake_A_encoded, self.fake_AA_encoded, self.fake_A_random = torch.split(output_fakeA, self.z_content_a.size(0), dim=0)
        self.fake_B_encoded, self.fake_BB_encoded, self.fake_B_random = torch.split(output_fakeB, self.z_content_a.size(0), dim=0)

        self.z_content_recon_b, self.z_content_recon_a = self.enc_c.forward(self.fake_A_encoded, self.fake_B_encoded)
        self.z_attr_recon_a, self.z_attr_recon_b = self.enc_a.forward(self.fake_A_encoded, self.fake_B_encoded)
        self.fake_A_recon = self.gen.forward_a(self.z_content_recon_a, self.z_attr_recon_a)
        self.fake_B_recon = self.gen.forward_b(self.z_content_recon_b, self.z_attr_recon_b)

        # for latent regression
        self.z_attr_random_a, self.z_attr_random_b = self.enc_a.forward(self.fake_A_random, self.fake_B_random)
    def forward_content(self):
        self.real_A_encoded = self.input_A[0:1]
        self.real_B_encoded = self.input_B[0:1]
        self.z_content_a, self.z_content_b = self.enc_c.forward(self.real_A_encoded, self.real_B_encoded)
    def update_D_content(self, image_a, image_b):
        self.input_A, self.input_B = image_a, image_b
        self.forward_content()
        self.disContent_opt.zero_grad()
        self.disContent_loss = self.backward_contentD(self.z_content_a, self.z_content_b).item()
        nn.utils.clip_grad_norm_(self.disContent.parameters(), 5)
        self.disContent_opt.step()
    def update_D(self, image_a, image_b):
        self.input_A, self.input_B = image_a, image_b
        self.forward()
        for opt, net, real, fake in ((self.disA_opt, self.disA, self.real_A_encoded, self.fake_A_encoded),
                                     (self.disA2_opt, self.disA2, self.real_A_random, self.fake_A_random),
                                     (self.disB_opt, self.disB, self.real_B_encoded, self.fake_B_encoded),
                                     (self.disB2_opt, self.disB2, self.real_B_random, self.fake_B_random)):
            opt.zero_grad()
            self.backward_D(net, real, fake)
            opt.step()
        self.disContent_opt.zero_grad()
        self.disContent_loss = self.backward_contentD(self.z_content_a, self.z_content_b).item()
        nn.utils.clip_grad_norm_(self.disContent.parameters(), 5)
        self.disContent_opt.step()
    def backward_D(self, netD, real, fake):
        pred_fake = netD.forward(fake.detach())
        pred_real = netD.forward(real)
        loss_D = 0
        for out_a, out_b in zip(pred_fake, pred_real):
            out_fake, out_real = torch.sigmoid(out_a), torch.sigmoid(out_b)
            loss_D += nn.functional.binary_cross_entropy(out_real, torch.ones_like(out_real)) + \
                nn.functional.binary_cross_entropy(out_fake, torch.zeros_like(out_fake))
        loss_D.backward()
        return loss_D
    def backward_contentD(self, imageA, imageB):
        pred_fake = self.disContent.forward(imageA.detach())
        pred_real = self.disContent.forward(imageB.detach())
        for out_a, out_b in zip(pred_fake, pred_real):
            out_fake, out_real = torch.sigmoid(out_a), torch.sigmoid(out_b)
            ad_true_loss = nn.functional.binary_cross_entropy(out_real, torch.ones(out_real.size(0)))
            ad_fake_loss = nn.functional.binary_cross_entropy(out_fake, torch.zeros(out_fake.size(0)))
        loss_D = ad_true_loss + ad_fake_loss
        loss_D.backward()
        return loss_D
    def update_EG(self):
        # update G, Ec, Ea
        self.enc_c_opt.zero_grad()
        self.enc_a_opt.zero_grad()
        self.gen_opt.zero_grad()
        self.backward_EG()
        self.enc_c_opt.step()
        self.enc_a_opt.step()
        self.gen_opt.step()

        # update G, Ec
        self.enc_c_opt.zero_grad()
        self.gen_opt.zero_grad()
        self.backward_G_alone()
        self.enc_c_opt.step()
        self.gen_opt.step()
    def backward_EG(self):
        loss_G_GAN_Acontent = self.backward_G_GAN_content(self.z_content_a)
        loss_G_GAN_Bcontent = self.backward_G_GAN_content(self.z_content_b)
        loss_G_GAN_A = self.backward_G_GAN(self.fake_A_encoded, self.disA)
        loss_G_GAN_B = self.backward_G_GAN(self.fake_B_encoded, self.disB)
        loss_kl_za_a = self._l2_regularize(self.z_attr_a) * 0.01
        loss_kl_za_b = self._l2_regularize(self.z_attr_b) * 0.01
        loss_kl_zc_a = self._l2_regularize(self.z_content_a) * 0.01
        loss_kl_zc_b = self._l2_regularize(self.z_content_b) * 0.01
        loss_G_L1_A = self.criterionL1(self.fake_A_recon, self.real_A_encoded) * 10
        loss_G_L1_B = self.criterionL1(self.fake_B_recon, self.real_B_encoded) * 10
        loss_G_L1_AA = self.criterionL1(self.fake_AA_encoded, self.real_A_encoded) * 10
        loss_G_L1_BB = self.criterionL1(self.fake_BB_encoded, self.real_B_encoded) * 10
        loss_G = loss_G_GAN_A + loss_G_GAN_B + loss_G_GAN_Acontent + loss_G_GAN_Bcontent + \
            loss_G_L1_AA + loss_G_L1_BB + loss_G_L1_A + loss_G_L1_B + \
            loss_kl_zc_a + loss_kl_zc_b + loss_kl_za_a + loss_kl_za_b
        loss_G.backward(retain_graph=True)
        self.G_loss = loss_G.item()
    def backward_G_GAN_content(self, data):
        outs = self.disContent.forward(data)
        for out in outs:
            outputs_fake = torch.sigmoid(out)
            ad_loss = nn.functional.binary_cross_entropy(outputs_fake, 0.5 * torch.ones(outputs_fake.size(0)))
        return ad_loss
    def backward_G_GAN(self, fake, netD=None):
        loss_G = 0
        for out_a in netD.forward(fake):
            outputs_fake = torch.sigmoid(out_a)
            loss_G += nn.functional.binary_cross_entropy(outputs_fake, torch.ones_like(outputs_fake))
        return loss_G
    def backward_G_alone(self):
        loss_G_GAN2_A = self.backward_G_GAN(self.fake_A_random, self.disA2)
        loss_G_GAN2_B = self.backward_G_GAN(self.fake_B_random, self.disB2)
        loss_z_L1_a = torch.mean(torch.abs(self.z_attr_random_a - self.z_random)) * 10
        loss_z_L1_b = torch.mean(torch.abs(self.z_attr_random_b - self.z_random)) * 10
        loss_z_L1 = loss_z_L1_a + loss_z_L1_b + loss_G_GAN2_A + loss_G_GAN2_B
        loss_z_L1.backward(retain_graph=True)  # raises
        self.l1_recon_z_loss = loss_z_L1_a.item() + loss_z_L1_b.item()
    def update_lr(self):
        for sch in self.schedulers:
            sch.step()
    def _l2_regularize(self, mu):
        return torch.mean(torch.pow(mu, 2))

def make_loader(rng, n_batches, batch_size, size=16):
    for _ in range(n_batches):
        a = torch.from_numpy(rng.rand(batch_size, 3, size, size).astype(np.float32) * 2 - 1)
        b = torch.from_numpy(rng.rand(batch_size, 3, size, size).astype(np.float32) * 2 - 1)
        gt = torch.from_numpy((rng.rand(batch_size, 1, size, size) > 0.5).astype(np.float32))
        yield a, b, gt, None

def parse_opts(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--input_dim_a", type=int, default=1)
    p.add_argument("--input_dim_b", type=int, default=1)
    p.add_argument("--batch_size", type=int, default=2)
    p.add_argument("--d_iter", type=int, default=3)
    p.add_argument("--n_ep", type=int, default=2)
    p.add_argument("--n_ep_decay", type=int, default=1)
    p.add_argument("--iters_per_ep", type=int, default=4)
    return p.parse_args(argv)

def main(argv=None):
    opts = parse_opts(argv)
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    model = DCDA(opts)
    model.initialize()
    ep0, total_it = -1, 0
    model.set_scheduler(opts, last_ep=ep0)
    ep0 += 1
    for ep in range(ep0, opts.n_ep):
        for it, (images_a, images_b, gt, _) in enumerate(make_loader(rng, opts.iters_per_ep, opts.batch_size)):
            images_a, images_b = images_a.detach(), images_b.detach()
            if (it + 1) % opts.d_iter != 0 and it < opts.iters_per_ep - 2:
                model.update_D_content(images_a[:, 0, :, :].unsqueeze(1), images_b[:, 0, :, :].unsqueeze(1))
                continue
            model.update_D(images_a[:, 0, :, :].unsqueeze(1), images_b[:, 0, :, :].unsqueeze(1))
            model.update_EG()
            print("total_it: %d (ep %d, it %d), lr %08f, G %.4f" % (
                total_it, ep, it, model.gen_opt.param_groups[0]["lr"], model.G_loss))
            total_it += 1
        model.update_lr()

if __name__ == "__main__":
    main([])
