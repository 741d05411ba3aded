# expect: inplace_version
# source: https://github.com/Jee-King/TSAN/issues/3
"""TSAN single-image super-resolution (two-stage attention network), EDSR-style
trainer. Model code follows Train/model/tsan.py with smaller widths.
"""
import math
from argparse import Namespace

import torch
import torch.nn as nn
import torch.nn.functional as F


def default_conv(in_channels, out_channels, kernel_size, bias=True):
    return nn.Conv2d(in_channels, out_channels, kernel_size, padding=(kernel_size // 2), bias=bias)


class MeanShift(nn.Conv2d):
    def __init__(self, rgb_range, rgb_mean, rgb_std, sign=-1):
        super().__init__(3, 3, kernel_size=1)
        std = torch.Tensor(rgb_std)
        self.weight.data = torch.eye(3).view(3, 3, 1, 1)
        self.weight.data.div_(std.view(3, 1, 1, 1))
        self.bias.data = sign * rgb_range * torch.Tensor(rgb_mean)
        self.bias.data.div_(std)
        for p in self.parameters():
            p.requires_grad = False


class Upsampler(nn.Sequential):
    def __init__(self, conv, scale, n_feats, act=False, bias=True):
        m = []
        if (scale & (scale - 1)) == 0:  # scale = 2^n
            for _ in range(int(math.log(scale, 2))):
                m.append(conv(n_feats, 4 * n_feats, 3, bias))
                m.append(nn.PixelShuffle(2))
        else:
            raise NotImplementedError
        super().__init__(*m)


class Conv_ReLU_Block(nn.Module):
    def __init__(self, n_feats):
        super().__init__()
        self.conv = nn.Conv2d(n_feats, n_feats, kernel_size=3, stride=1, padding=1, bias=False)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.relu(self.conv(x))


class make_dense(nn.Module):
    def __init__(self, n_channels, n_feats=64, i=0):
        super().__init__()
        s = i + 1 if i < 3 else i - 2 * (i - 3)
        self.conv_1_1 = nn.Conv2d(n_channels, n_feats, 1, padding=0, stride=1)
        self.conv_1_2 = nn.Conv2d(n_feats * 4, n_feats, 1, padding=0, stride=1)
        self.conv_3_1 = nn.Conv2d(n_feats, n_feats, 3, padding=s, stride=1, dilation=s)
        self.dilated_conv_3_1 = nn.Conv2d(n_feats, n_feats, 3, padding=s, stride=1, dilation=s)
        self.conv_3_2 = nn.Conv2d(n_feats, n_feats, 3, padding=s, stride=1, dilation=s)
        self.dilated_conv_3_2 = nn.Conv2d(n_feats, n_feats, 3, padding=s, stride=1, dilation=s)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        out1x1 = self.relu(self.conv_1_1(x))
        input_1_1 = self.relu(self.conv_3_1(out1x1))
        input_1_2 = self.relu(self.dilated_conv_3_1(input_1_1))
        input_2_1 = self.relu(self.dilated_conv_3_2(out1x1))
        input_2_2 = self.relu(self.conv_3_2(input_2_1))
        output = torch.cat([input_1_1, input_1_2, input_2_1, input_2_2], 1)
        output = self.relu(self.conv_1_2(output))
        output = torch.cat([output, x], 1)
        return output


class DRB(nn.Module):
    def __init__(self, n_channels, n_denselayer=6, n_feats=64):
        super().__init__()
        nChannels_ = n_channels
        modules = []
        for i in range(n_denselayer):
            modules.append(make_dense(nChannels_, n_feats, i))
            nChannels_ += n_feats
        self.dense_layers = nn.Sequential(*modules)
        self.conv_1x1 = nn.Conv2d(nChannels_, n_feats, kernel_size=1, padding=0, bias=False)

    def forward(self, x):
        out = self.dense_layers(x)
        out = self.conv_1x1(out)
        return x + out


class CSB(nn.Module):
    def __init__(self, n_feats):
        super().__init__()
        self.conv1 = nn.Conv2d(n_feats * 4, n_feats * 4, kernel_size=1, padding=0, bias=False)

    def forward(self, x):
        f1 = x[:, :, 0:x.size(2) // 2, 0:x.size(3) // 2]
        f2 = x[:, :, x.size(2) // 2:, 0:x.size(3) // 2]
        f3 = x[:, :, 0:x.size(2) // 2, x.size(3) // 2:]
        f4 = x[:, :, x.size(2) // 2:, x.size(3) // 2:]
        f_all = torch.cat([f1, f2, f3, f4], 1)
        f_all = self.conv1(f_all)
        out = x
        out[:, :, 0:x.size(2) // 2, 0:x.size(3) // 2] = f_all[:, 0:f_all.size(1) // 4, :, :]
        out[:, :, x.size(2) // 2:, 0:x.size(3) // 2] = f_all[:, f_all.size(1) // 4:f_all.size(1) // 2, :, :]
        out[:, :, 0:x.size(2) // 2, x.size(3) // 2:] = f_all[:, f_all.size(1) // 2:f_all.size(1) * 3 // 4, :, :]
        out[:, :, x.size(2) // 2:, x.size(3) // 2:] = f_all[:, f_all.size(1) * 3 // 4:, :, :]
        return out


class First_Order(nn.Module):
    def __init__(self):
        super().__init__()
        self.adaptive = nn.AdaptiveAvgPool2d((1, 1))

    def forward(self, x):
        first_c = torch.sigmoid(self.adaptive(x)) * x
        xh = x.permute(0, 2, 1, 3)
        first_h = (torch.sigmoid(self.adaptive(xh)) * xh).permute(0, 2, 1, 3)
        xw = x.permute(0, 3, 2, 1)
        first_w = (torch.sigmoid(self.adaptive(xw)) * xw).permute(0, 3, 2, 1)
        return first_c + first_h + first_w + x


class Second_Order(nn.Module):
    def forward(self, x):
        second_c = torch.sigmoid(torch.mean(x, 1).unsqueeze(1)) * x
        xh = x.permute(0, 2, 1, 3)
        second_h = (torch.sigmoid(torch.mean(xh, 1).unsqueeze(1)) * xh).permute(0, 2, 1, 3)
        xw = x.permute(0, 3, 2, 1)
        second_w = (torch.sigmoid(torch.mean(xw, 1).unsqueeze(1)) * xw).permute(0, 3, 2, 1)
        return second_c + second_h + second_w + x


class MCAB(nn.Module):
    def __init__(self, n_channels, n_denselayer=6, n_feats=64):
        super().__init__()
        self.drb = DRB(n_channels, n_denselayer, n_feats)
        self.csb = CSB(n_feats)
        self.first = First_Order()
        self.second = Second_Order()
        self.conv3 = nn.Conv2d(n_feats, n_feats, kernel_size=3, padding=1, bias=False)

    def forward(self, x):
        down_b = self.drb(x)
        top_b = self.csb(x)
        top_b = self.second(self.first(top_b))
        top_b = torch.sigmoid(self.conv3(top_b))
        return down_b * top_b


class TSAN(nn.Module):
    def __init__(self, args):
        super().__init__()
        conv = default_conv
        n_feats, scale, n_colors = args.n_feats, args.scale[0], args.n_colors
        rgb_mean, rgb_std = (0.4488, 0.4371, 0.4040), (1.0, 1.0, 1.0)
        self.sub_mean = MeanShift(args.rgb_range, rgb_mean, rgb_std)
        self.first_conv = nn.Conv2d(n_colors, n_feats, 1, padding=0, stride=1)
        self.body1 = MCAB(n_feats, args.n_denselayer, n_feats)
        self.body2 = MCAB(n_feats, args.n_denselayer, n_feats)
        self.tail = nn.Sequential(nn.Conv2d(n_feats * 2, n_feats, 1, padding=0, stride=1),
                                  conv(n_feats, n_feats, 3))
        self.up = nn.Sequential(Upsampler(conv, scale, n_feats, act=False))
        self.output1 = conv(n_feats, n_colors, 1)
        self.output2 = conv(n_feats, n_colors, 1)
        self.add_mean = MeanShift(args.rgb_range, rgb_mean, rgb_std, 1)
        self.relu = nn.ReLU(inplace=True)
        self.first2_conv = nn.Conv2d(n_colors, n_feats, 1, padding=0, stride=1)
        self.refine = nn.Sequential(*[Conv_ReLU_Block(n_feats) for _ in range(2)])

    def forward(self, x):
        x = self.sub_mean(x)
        first_out = self.relu(self.first_conv(x))
        out_dense1 = self.body1(first_out)
        out_dense2 = self.body2(out_dense1)
        dense = torch.cat([out_dense1, out_dense2], 1)
        out = self.tail(dense)
        out = out + first_out
        out = self.up(out)
        out = self.output1(out)
        out1 = self.add_mean(out)
        out2 = self.refine(self.first2_conv(out))
        out2 = self.output2(out2) + out
        out2 = self.add_mean(out2)
        return out1, out2


class Trainer:
    def __init__(self, args, model):
        self.args = args
        self.model = model
        self.loss = nn.L1Loss()
        self.optimizer = torch.optim.Adam(
            [p for p in model.parameters() if p.requires_grad], lr=args.lr, betas=(0.9, 0.999))
        self.scheduler = torch.optim.lr_scheduler.MultiStepLR(self.optimizer, milestones=[2],
                                                              gamma=args.gamma)
        self.epoch = 0

    def make_batch(self, g):
        hr = torch.rand(self.args.batch_size, 3, self.args.patch_size, self.args.patch_size,
                        generator=g) * self.args.rgb_range
        lr = F.interpolate(hr, scale_factor=1 / self.args.scale[0], mode="bicubic",
                           align_corners=False)
        return lr, hr

    def train(self):
        self.model.train()
        g = torch.Generator().manual_seed(self.epoch)
        for batch in range(self.args.batches_per_epoch):
            lr, hr = self.make_batch(g)
            self.optimizer.zero_grad()
            sr1, sr2 = self.model(lr)
            loss = self.loss(sr1, hr) + self.loss(sr2, hr)
            loss.backward()  # raises
            if self.args.gclip > 0:
                nn.utils.clip_grad_value_(self.model.parameters(), self.args.gclip)
            self.optimizer.step()
            if (batch + 1) % self.args.print_every == 0:
                print("[epoch {}] [{}/{}] L1 {:.4f}".format(
                    self.epoch, batch + 1, self.args.batches_per_epoch, loss.item()))
        self.scheduler.step()
        self.epoch += 1

    @torch.no_grad()
    def test(self):
        self.model.eval()
        lr, hr = self.make_batch(torch.Generator().manual_seed(123))
        _, sr = self.model(lr)
        sr = sr.clamp(0, self.args.rgb_range)
        mse = ((sr - hr) / self.args.rgb_range).pow(2).mean()
        return -10 * math.log10(mse.item())


def main():
    torch.manual_seed(0)
    args = Namespace(n_feats=16, n_denselayer=2, scale=[2], n_colors=3, rgb_range=255,
                     lr=1e-4, gamma=0.5, batch_size=2, patch_size=24, batches_per_epoch=3,
                     epochs=2, gclip=0, print_every=3)
    trainer = Trainer(args, TSAN(args))
    for _ in range(args.epochs):
        trainer.train()
        print("PSNR {:.2f} dB".format(trainer.test()))


if __name__ == "__main__":
    main()
