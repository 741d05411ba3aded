# expect: inplace_version
# source: https://github.com/wangyx240/High-Resolution-Image-Inpainting-GAN/issues/7
"""Two-stage gated-convolution image inpainting GAN (DeepFill-v2 style, high-resolution variant).

A coarse network fills the hole at half resolution; a refinement network with patch-level
contextual attention produces the final image. A spectral-norm patch discriminator is
trained with a hinge loss; the generator with masked L1 losses on both stages, an
adversarial loss and a perceptual loss from a frozen feature network. Separate Adam
optimizers for the coarse stage, the whole generator and the discriminator, step-wise LR
decay and in-memory checkpoints. Synthetic images and free-form masks, CPU only.
"""
import argparse
import datetime
import time

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset


class GatedConv2d(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 activation='elu', norm='none', sc=False):
        super(GatedConv2d, self).__init__()
        self.pad = nn.ZeroPad2d(padding)
        self.norm = nn.InstanceNorm2d(out_channels) if norm == 'in' else None
        self.activation = nn.ELU() if activation == 'elu' else (
            nn.LeakyReLU(0.2) if activation == 'lrelu' else None)
        self.conv2d = nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding=0, dilation=dilation)
        self.mask_conv2d = nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding=0, dilation=dilation)
        self.sigmoid = nn.Sigmoid()

    def forward(self, x):
        x = self.pad(x)
        conv, mask = self.conv2d(x), self.mask_conv2d(x)
        if self.activation is not None:
            conv = self.activation(conv)
        x = conv * self.sigmoid(mask)
        return self.norm(x) if self.norm is not None else x


class TransposeGatedConv2d(GatedConv2d):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 activation='elu', norm='none', sc=False, scale_factor=2):
        super(TransposeGatedConv2d, self).__init__(in_channels, out_channels, kernel_size, stride, padding,
                                                   dilation, activation, norm, sc)
        self.scale_factor = scale_factor

    def forward(self, x):
        return super(TransposeGatedConv2d, self).forward(F.interpolate(x, scale_factor=self.scale_factor,
                                                                       mode='nearest'))


class Coarse(nn.Module):
    def __init__(self, opt):
        super(Coarse, self).__init__()
        a, n = opt.activation, opt.norm
        self.coarse1 = nn.Sequential(GatedConv2d(4, 16, 5, 2, 2, activation=a, norm=n, sc=True),
                                     GatedConv2d(16, 32, 3, 1, 1, activation=a, norm=n, sc=True))
        self.coarse2 = nn.Sequential(GatedConv2d(32, 32, 3, 1, 2, dilation=2, activation=a, norm=n, sc=True))
        self.coarse3 = nn.Sequential(GatedConv2d(32, 32, 3, 1, 4, dilation=4, activation=a, norm=n, sc=True))
        self.coarse9 = nn.Sequential(TransposeGatedConv2d(32, 16, 3, 1, 1, activation=a, norm=n, sc=True),
                                     GatedConv2d(16, 3, 3, 1, 1, activation='none', norm=n, sc=True), nn.Tanh())

    def forward(self, first_in):
        first_out = self.coarse1(first_in)
        first_out = self.coarse2(first_out) + first_out
        first_out = self.coarse3(first_out) + first_out
        return torch.clamp(self.coarse9(first_out), 0, 1)


class GatedGenerator(nn.Module):
    def __init__(self, opt):
        super(GatedGenerator, self).__init__()
        a, n = opt.activation, opt.norm
        self.low_size, self.size = opt.imgsize // 2, opt.imgsize
        self.coarse = Coarse(opt)
        self.refinement1 = nn.Sequential(GatedConv2d(3, 16, 5, 2, 2, activation=a, norm=n))
        self.refinement2 = nn.Sequential(GatedConv2d(16, 32, 3, 2, 1, activation=a, norm=n))
        self.refinement5 = nn.Sequential(GatedConv2d(32, 32, 3, 1, 2, dilation=2, activation=a, norm=n))
        self.refinement7 = nn.Sequential(GatedConv2d(64, 32, 3, 1, 1, activation=a, norm=n),
                                         TransposeGatedConv2d(32, 16, 3, 1, 1, activation=a, norm=n))
        self.refinement9 = nn.Sequential(TransposeGatedConv2d(16, 16, 3, 1, 1, activation=a, norm=n),
                                         GatedConv2d(16, 3, 3, 1, 1, activation='none', norm=n), nn.Tanh())
        self.conv_pl2 = nn.Sequential(GatedConv2d(32, 32, 3, 1, 1, activation=a, norm=n))

    def forward(self, img, mask):
        img_low = F.interpolate(img, size=[self.low_size, self.low_size], mode='bilinear', align_corners=False)
        mask_low = F.interpolate(mask, size=[self.low_size, self.low_size], mode='nearest')
        first_masked_img = img_low * (1 - mask_low) + mask_low
        first_out = self.coarse(torch.cat((first_masked_img, mask_low), 1))
        first_out = F.interpolate(first_out, size=[self.size, self.size], mode='nearest')
        # Refinement
        second_in = img * (1 - mask) + first_out * mask
        pl2 = self.refinement2(self.refinement1(second_in))
        second_out = self.refinement5(pl2) + pl2
        att = self.compute_attention(pl2, self.cal_patch(4, mask, self.size))
        second_out = torch.cat((second_out, self.conv_pl2(self.attention_transfer(pl2, att))), 1)
        second_out = self.refinement9(self.refinement7(second_out))
        return first_out, torch.clamp(second_out, 0, 1)

    def cal_patch(self, patch_num, mask, raw_size):
        return nn.MaxPool2d(raw_size // patch_num)(mask)

    def compute_attention(self, feature, patch_fb):
        b, c = feature.shape[:2]
        n = patch_fb.shape[-1]
        feature = F.adaptive_avg_pool2d(feature, n)
        p_fb = torch.reshape(patch_fb, [b, n * n, 1])
        p_matrix = torch.bmm(p_fb, (1 - p_fb).permute([0, 2, 1]))
        f = feature.permute([0, 2, 3, 1]).reshape([b, n * n, c])
        f = f / (f.norm(dim=2, keepdim=True) + 1e-6)
        return F.softmax(torch.bmm(f, f.permute([0, 2, 1])) * p_matrix, dim=2) * p_matrix

    def attention_transfer(self, feature, attention):
        b, c, h, w = feature.shape
        n = int(attention.shape[1] ** 0.5)
        f = feature.reshape([b, c, n, h // n, n, w // n]).permute([0, 2, 4, 3, 5, 1]).reshape([b, n * n, -1])
        f = torch.bmm(attention, f).reshape([b, n, n, h // n, w // n, c]).permute([0, 5, 1, 3, 2, 4])
        return f.reshape([b, c, h, w])


class PatchDiscriminator(nn.Module):
    def __init__(self, opt):
        super(PatchDiscriminator, self).__init__()
        sn = nn.utils.spectral_norm
        self.blocks = nn.Sequential(sn(nn.Conv2d(4, 32, 3, 2, 1)), nn.LeakyReLU(0.2),
                                    sn(nn.Conv2d(32, 64, 3, 2, 1)), nn.LeakyReLU(0.2),
                                    sn(nn.Conv2d(64, 16, 3, 2, 1)), nn.LeakyReLU(0.2))
        self.block7 = nn.Linear(16 * (opt.imgsize // 8) ** 2, 1)

    def forward(self, img, mask):
        x = self.blocks(torch.cat((img, mask), 1))
        return self.block7(x.reshape([x.shape[0], -1]))


class PerceptualNet(nn.Module):
    def __init__(self):
        super(PerceptualNet, self).__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1), nn.ReLU(inplace=True), nn.MaxPool2d(2, 2),
                                      nn.Conv2d(16, 32, 3, 1, 1))

    def forward(self, x):
        return self.features(x)


def create_perceptualnet():
    perceptualnet = PerceptualNet()
    for param in perceptualnet.parameters():
        param.requires_grad = False
    return perceptualnet


class InpaintDataset(Dataset):
    def __init__(self, opt):
        self.opt = opt
        rng = np.random.RandomState(opt.seed)
        self.imgs = rng.rand(opt.num_images, 3, opt.imgsize, opt.imgsize).astype(np.float32)
        self.masks = [self.random_ff_mask(rng) for _ in range(opt.num_images)]

    def __len__(self):
        return len(self.imgs)

    def random_ff_mask(self, rng):
        """Free-form strokes of random length, angle and width."""
        size = self.opt.imgsize
        mask = np.zeros((size, size), np.float32)
        for _ in range(rng.randint(1, 4)):
            x, y = rng.randint(size), rng.randint(size)
            for _ in range(rng.randint(2, 6)):
                angle, length = rng.uniform(0, 2 * np.pi), rng.randint(3, size // 2)
                nx = int(np.clip(x + length * np.cos(angle), 0, size - 1))
                ny = int(np.clip(y + length * np.sin(angle), 0, size - 1))
                w = rng.randint(1, self.opt.bbox_shape)
                mask[min(y, ny):max(y, ny) + w, min(x, nx):max(x, nx) + w] = 1.0
                x, y = nx, ny
        return mask[None]

    def __getitem__(self, index):
        return torch.from_numpy(self.imgs[index]), torch.from_numpy(self.masks[index])


def WGAN_trainer(opt):
    generator, discriminator = GatedGenerator(opt), PatchDiscriminator(opt)
    perceptualnet = create_perceptualnet()
    L1Loss, RELU = nn.L1Loss(), nn.ReLU()

    optimizer_g1 = torch.optim.Adam(generator.coarse.parameters(), lr=opt.lr_g)
    optimizer_g = torch.optim.Adam(generator.parameters(), lr=opt.lr_g)
    optimizer_d = torch.optim.Adam(discriminator.parameters(), lr=opt.lr_d)

    def adjust_learning_rate(lr_in, optimizer, epoch, opt):
        lr = lr_in * (opt.lr_decrease_factor ** (epoch // opt.lr_decrease_epoch))
        for param_group in optimizer.param_groups:
            param_group['lr'] = lr

    checkpoints = {}

    def save_model(net, epoch, opt, is_D=False):
        name = ('discriminator' if is_D else 'deepfillv2') + '_WGAN_epoch%d_batchsize%d' % (epoch + 1, opt.batch_size)
        if epoch % opt.checkpoint_interval == 0:
            checkpoints[name] = {k: v.detach().clone() for k, v in net.state_dict().items()}

    trainset = InpaintDataset(opt)
    dataloader = DataLoader(trainset, batch_size=opt.batch_size, shuffle=True)
    prev_time = time.time()
    for epoch in range(opt.epochs):
        for batch_idx, (img, mask) in enumerate(dataloader):
            first_out, second_out = generator(img, mask)
            first_out_wholeimg = img * (1 - mask) + first_out * mask
            second_out_wholeimg = img * (1 - mask) + second_out * mask

            for wk in range(1):
                optimizer_d.zero_grad()
                fake_scalar = discriminator(second_out_wholeimg.detach(), mask)
                true_scalar = discriminator(img, mask)
                loss_D = torch.mean(RELU(1 - true_scalar)) + torch.mean(RELU(fake_scalar + 1))
                loss_D.backward(retain_graph=True)
                optimizer_d.step()

            ### Train Generator
            first_MaskL1Loss = L1Loss(first_out_wholeimg, img)
            second_MaskL1Loss = L1Loss(second_out_wholeimg, img)
            fake_scalar = discriminator(second_out_wholeimg, mask)
            GAN_Loss = - torch.mean(fake_scalar)

            optimizer_g1.zero_grad()
            first_MaskL1Loss.backward(retain_graph=True)
            optimizer_g1.step()

            optimizer_g.zero_grad()
            img_featuremaps = perceptualnet(img)
            second_out_wholeimg_featuremaps = perceptualnet(second_out_wholeimg)
            second_PerceptualLoss = L1Loss(second_out_wholeimg_featuremaps, img_featuremaps)
            loss = 0.5 * opt.lambda_l1 * first_MaskL1Loss + opt.lambda_l1 * second_MaskL1Loss + GAN_Loss \
                + second_PerceptualLoss * opt.lambda_perceptual
            loss.backward()  # raises
            optimizer_g.step()

            batches_left = opt.epochs * len(dataloader) - (epoch * len(dataloader) + batch_idx)
            time_left = datetime.timedelta(seconds=batches_left * (time.time() - prev_time))
            prev_time = time.time()
            print("[Epoch %d/%d] [Batch %d/%d] [first L1: %.5f] [second L1: %.5f] [D: %.5f] [G: %.5f] left: %s" %
                  (epoch + 1, opt.epochs, batch_idx + 1, len(dataloader), first_MaskL1Loss.item(),
                   second_MaskL1Loss.item(), loss_D.item(), GAN_Loss.item(), time_left))

        adjust_learning_rate(opt.lr_g, optimizer_g, (epoch + 1), opt)
        adjust_learning_rate(opt.lr_d, optimizer_d, (epoch + 1), opt)
        save_model(generator, epoch, opt)
        save_model(discriminator, epoch, opt, is_D=True)
    return checkpoints


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--checkpoint_interval', type=int, default=1, help='interval between model checkpoints')
    parser.add_argument('--epochs', type=int, default=2, help='number of epochs of training')
    parser.add_argument('--batch_size', type=int, default=2, help='size of the batches')
    parser.add_argument('--lr_g', type=float, default=1e-4, help='Adam: learning rate')
    parser.add_argument('--lr_d', type=float, default=4e-4, help='Adam: learning rate')
    parser.add_argument('--lr_decrease_epoch', type=int, default=10, help='lr decrease at certain epoch')
    parser.add_argument('--lr_decrease_factor', type=float, default=0.5, help='lr decrease factor')
    parser.add_argument('--lambda_l1', type=float, default=10, help='the parameter of L1Loss')
    parser.add_argument('--lambda_perceptual', type=float, default=10, help='the parameter of perceptual loss')
    parser.add_argument('--activation', type=str, default='elu', help='the activation type')
    parser.add_argument('--norm', type=str, default='none', help='normalization type')
    parser.add_argument('--imgsize', type=int, default=32, help='size of image')
    parser.add_argument('--bbox_shape', type=int, default=4, help='margin of image for bbox mask')
    parser.add_argument('--num_images', type=int, default=6, help='synthetic training images')
    parser.add_argument('--seed', type=int, default=0)
    opt = parser.parse_args([])
    torch.manual_seed(opt.seed)
    checkpoints = WGAN_trainer(opt)
    print('saved checkpoints:', sorted(checkpoints))


if __name__ == '__main__':
    main()
