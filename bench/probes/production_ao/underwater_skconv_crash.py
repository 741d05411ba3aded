# expect: inplace_version
# source: https://github.com/aupendu/zero-restore/issues/7
"""Zero-shot underwater image enhancement (zero-restore style).

For every test image a fresh transmission/atmospheric-light estimation network
(selective-kernel multi-scale input convolution, dark-channel style channel
minimum, U-shaped estimation heads) is optimised on that single image with
self-supervised losses (colour constancy, transmission consistency under a
synthetic re-hazing, total variation, range penalties).  The restored image is
then produced in eval mode.  Test images are seeded synthetic tensors.
"""
import argparse
import math
import random

import numpy as np
import torch
import torch.nn as nn


def get_args(argv=None):
    parser = argparse.ArgumentParser(description='Underwater Image Enhancement')
    parser.add_argument('--num-images', type=int, default=2)
    parser.add_argument('--size', type=int, default=128)
    parser.add_argument('--itr-no', type=int, default=3)
    parser.add_argument('--lr', type=float, default=1e-3)
    parser.add_argument('--weight-decay', type=float, default=1e-2)
    parser.add_argument('--px', type=float, default=0.9)
    parser.add_argument('--seed', type=int, default=1)
    return parser.parse_args(argv)


def seed_everything(seed):
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find('Conv2d') != -1:
        m.weight.data.normal_(0.0, 0.001)
    if classname.find('Linear') != -1:
        m.weight.data.normal_(0.0, 0.001)


class DoubleConv(nn.Module):
    def __init__(self, in_ch, out_ch, stride=1, k=3):
        super(DoubleConv, self).__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(in_ch, out_ch, k, stride=stride, padding=k // 2, bias=False, padding_mode='reflect'),
            nn.GroupNorm(num_channels=out_ch, num_groups=8, affine=True),
            nn.ReLU(inplace=True),
            nn.Conv2d(out_ch, out_ch, 3, padding=1, bias=False, padding_mode='reflect'),
            nn.GroupNorm(num_channels=out_ch, num_groups=8, affine=True),
            nn.ReLU(inplace=True),
        )

    def forward(self, x):
        return self.conv(x)


class InConv(nn.Module):
    def __init__(self, in_ch, out_ch):
        super(InConv, self).__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(in_ch, out_ch, 7, stride=4, padding=3, bias=False, padding_mode='reflect'),
            nn.GroupNorm(num_channels=out_ch, num_groups=8, affine=True),
            nn.ReLU(inplace=True),
        )
        self.convf = nn.Sequential(
            nn.Conv2d(out_ch, out_ch, 3, padding=1, bias=False, padding_mode='reflect'),
            nn.GroupNorm(num_channels=out_ch, num_groups=8, affine=True),
            nn.ReLU(inplace=False),
        )

    def forward(self, x):
        R = x[:, 0:1, :, :]
        G = x[:, 1:2, :, :]
        B = x[:, 2:3, :, :]
        xR = torch.unsqueeze(self.conv(R), 1)
        xG = torch.unsqueeze(self.conv(G), 1)
        xB = torch.unsqueeze(self.conv(B), 1)
        x = torch.cat([xR, xG, xB], 1)
        x, _ = torch.min(x, dim=1)
        return self.convf(x)


class SKConv(nn.Module):
    def __init__(self, outfeatures=64, infeatures=1, M=4, L=32):
        super(SKConv, self).__init__()
        self.M = M
        self.convs = nn.ModuleList([])
        in_conv = InConv(in_ch=infeatures, out_ch=outfeatures)
        for i in range(M):
            if i == 0:
                self.convs.append(in_conv)
            else:
                self.convs.append(nn.Sequential(
                    nn.Upsample(scale_factor=1 / (2 ** i), mode='bilinear', align_corners=True),
                    in_conv,
                    nn.Upsample(scale_factor=2 ** i, mode='bilinear', align_corners=True),
                ))
        self.fc = nn.Linear(outfeatures, L)
        self.fcs = nn.ModuleList([nn.Linear(L, outfeatures) for _ in range(M)])
        self.softmax = nn.Softmax(dim=1)

    def forward(self, x):
        for i, conv in enumerate(self.convs):
            fea = conv(x).unsqueeze_(dim=1)
            if i == 0:
                feas = fea
            else:
                feas = torch.cat([feas, fea], dim=1)
        fea_U = torch.sum(feas, dim=1)
        fea_s = fea_U.mean(-1).mean(-1)
        fea_z = self.fc(fea_s)
        for i, fc in enumerate(self.fcs):
            vector = fc(fea_z).unsqueeze_(dim=1)
            if i == 0:
                attention_vectors = vector
            else:
                attention_vectors = torch.cat([attention_vectors, vector], dim=1)
        attention_vectors = self.softmax(attention_vectors)
        attention_vectors = attention_vectors.unsqueeze(-1).unsqueeze(-1)
        return (feas * attention_vectors).sum(dim=1)


class Estimation(nn.Module):
    def __init__(self):
        super(Estimation, self).__init__()
        self.InConv = SKConv(outfeatures=64, infeatures=1, M=3, L=32)
        self.convt = DoubleConv(64, 64)
        self.OutConv = nn.Conv2d(64, 3, 3, padding=1, stride=1, bias=False, padding_mode='reflect')
        self.up = nn.Upsample(scale_factor=4, mode='bilinear', align_corners=True)
        self.conv1 = DoubleConv(3, 64, stride=4, k=9)
        self.conv2 = DoubleConv(64, 64)
        self.maxpool = nn.MaxPool2d(15, 7)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.dense = nn.Linear(64, 3, bias=False)

    def forward(self, x):
        xmin = self.InConv(x)
        trans = self.OutConv(self.up(self.convt(xmin)))
        trans = torch.sigmoid(trans) + 1e-12
        atm = self.conv1(x)
        atm = torch.mul(atm, xmin)
        atm = self.pool(self.conv2(self.maxpool(atm)))
        atm = atm.view(-1, 64)
        atm = torch.sigmoid(self.dense(atm))
        return trans, atm


class MainModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.estimation = Estimation()

    def forward(self, x):
        trans, atm = self.estimation(x)
        atm = torch.unsqueeze(torch.unsqueeze(atm, 2), 2)
        atm = atm.expand_as(x)
        out = (x - (1 - trans) * atm) / trans
        return trans, atm, out


class I_TV(nn.Module):
    def forward(self, x):
        batch_size, h_x, w_x = x.size()[0], x.size()[2], x.size()[3]
        count_h, count_w = (h_x - 1) * w_x, h_x * (w_x - 1)
        h_tv = torch.pow((x[:, :, 1:, :] - x[:, :, :h_x - 1, :]), 2).sum()
        w_tv = torch.pow((x[:, :, :, 1:] - x[:, :, :, :w_x - 1]), 2).sum()
        return (h_tv / count_h + w_tv / count_w) / batch_size


class L_color(nn.Module):
    def forward(self, x):
        mean_rgb = torch.mean(x, [2, 3], keepdim=True)
        mr, mg, mb = torch.split(mean_rgb, 1, dim=1)
        Drg = torch.pow(mr - mg, 2)
        Drb = torch.pow(mr - mb, 2)
        Dgb = torch.pow(mb - mg, 2)
        return torch.pow(torch.pow(Drg, 2) + torch.pow(Drb, 2) + torch.pow(Dgb, 2), 0.5).sum()


def _augment(_image):
    it = random.randint(0, 7)
    if it == 1: _image = _image.rot90(1, [2, 3])
    if it == 2: _image = _image.rot90(2, [2, 3])
    if it == 3: _image = _image.rot90(3, [2, 3])
    if it == 4: _image = _image.flip(2).rot90(1, [2, 3])
    if it == 5: _image = _image.flip(3).rot90(1, [2, 3])
    if it == 6: _image = _image.flip(2)
    if it == 7: _image = _image.flip(3)
    return _image


def red_channel_compensation(Input):
    Ig = torch.mean(Input[0, 1, :, :])
    Ir = torch.mean(Input[0, 0, :, :])
    Input[0, 0, :, :] = Input[0, 0, :, :] + (Ig - Ir) * (1 - Input[0, 0, :, :]) * Input[0, 1, :, :]
    return torch.clamp(Input, 0, 1)


def psnr(imgS, imgG):
    mse = (imgS - imgG).pow(2).mean().item()
    return -10 * math.log10(max(mse, 1e-12))


class ZeroShotRestorer:
    """Fits one freshly initialised network per image."""

    def __init__(self, args, callbacks=()):
        self.args = args
        self.callbacks = list(callbacks)
        self._color = L_color()
        self._img_TV = I_TV()

    def build(self):
        self.model = MainModel()
        self.model.apply(weights_init)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=self.args.lr, betas=(0.99, 0.999),
                                          eps=1e-08, weight_decay=self.args.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=1000, gamma=0.5)

    def train_step(self, Input):
        self.model.train()
        Inputmage = _augment(Input)
        self.optimizer.zero_grad()
        trans_map, atm_map, HazefreeImage = self.model(Inputmage)

        px = self.args.px
        InputmageX = Inputmage * px + (1 - px) * atm_map
        trans_mapX, atm_mapX, HazefreeImageX = self.model(InputmageX)

        otensor = torch.ones(HazefreeImage.shape)
        ztensor = torch.zeros(HazefreeImage.shape)
        lossT = torch.sum(torch.abs(trans_mapX - px * trans_map))
        lossMx = torch.sum(torch.max(HazefreeImage, otensor)) + torch.sum(torch.max(HazefreeImageX, otensor)) \
            - 2 * torch.sum(otensor)
        lossMn = -torch.sum(torch.min(HazefreeImage, ztensor)) - torch.sum(torch.min(HazefreeImageX, ztensor))
        lossCLR = self._color(HazefreeImage)
        lossA = torch.sum((atm_map - atm_mapX) ** 2)
        lossI = self._img_TV(HazefreeImage)

        loss = 1000 * lossCLR + lossT + lossA + 0.001 * lossMx + 0.001 * lossMn + 0.001 * lossI
        loss.backward()  # raises
        self.optimizer.step()
        self.scheduler.step()
        return loss.item()

    def evaluate(self, Input, Reference):
        self.model.eval()
        with torch.no_grad():
            _trans, _atm, _GT = self.model(Input)
            _GT = torch.clamp(_GT, 0, 1)
        return _GT, psnr(_GT, Reference)

    def restore(self, Input, Reference):
        self.build()
        Input = red_channel_compensation(Input.clone())
        for k in range(self.args.itr_no):
            loss = self.train_step(Input)
            for cb in self.callbacks:
                cb(k, loss)
        return self.evaluate(Input, Reference)


def synthetic_underwater(size, generator):
    clean = torch.rand(1, 3, size, size, generator=generator)
    t = 0.4 + 0.5 * torch.rand(1, 1, size, size, generator=generator)
    A = torch.tensor([0.1, 0.6, 0.7]).view(1, 3, 1, 1)
    return clean * t + A * (1 - t), clean


def main(argv=None):
    args = get_args(argv)
    seed_everything(args.seed)
    g = torch.Generator().manual_seed(args.seed)
    restorer = ZeroShotRestorer(args, callbacks=[lambda k, l: print('itr %d loss %.4f' % (k, l))])
    for i in range(args.num_images):
        Input, Reference = synthetic_underwater(args.size, g)
        H, W = Input.shape[2], Input.shape[3]
        H, W = H - H % 32, W - W % 32
        Input, Reference = Input[:, :, 0:H, 0:W], Reference[:, :, 0:H, 0:W]
        print("Images Processed: %d/ %d" % (i + 1, args.num_images))
        _, score = restorer.restore(Input, Reference)
        print("PSNR %.2f dB" % score)


if __name__ == '__main__':
    main()
