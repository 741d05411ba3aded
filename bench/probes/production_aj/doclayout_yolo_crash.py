# expect: leaf_inplace
# source: https://github.com/WongKinYiu/ScaledYOLOv4/issues/191
"""Document-layout detector (text / title / table / figure blocks) in the Scaled-YOLOv4 layout.

`Model` is built from a yolo-style config dict (backbone of Conv/BottleneckCSP blocks,
a small PAN neck, a `Detect` head over two strides) and initialises the detection
biases from class frequency priors.  `train()` follows yolo's train.py: three
parameter groups (BN / weights with decay / biases), SGD with nesterov, warm-up and a
one-cycle cosine LambdaLR, a ModelEMA copy that is evaluated after each epoch, and a
simplified objectness + class + box loss.  Synthetic page renders, CPU only.
"""
import argparse
import math
import random
from copy import deepcopy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MODEL_CFG = {
    'nc': 4,  # text, title, table, figure
    'anchors': [[10, 13, 16, 30, 33, 23], [30, 61, 62, 45, 59, 119]],
    'backbone': [[-1, 'Conv', [16, 3, 1]], [-1, 'Conv', [32, 3, 2]], [-1, 'BottleneckCSP', [32, 1]],
                 [-1, 'Conv', [64, 3, 2]], [-1, 'BottleneckCSP', [64, 1]], [-1, 'Conv', [64, 3, 2]]],
}


def parse_opt(args=None):
    p = argparse.ArgumentParser()
    p.add_argument('--epochs', type=int, default=2)
    p.add_argument('--batch-size', type=int, default=4)
    p.add_argument('--img-size', type=int, default=64)
    p.add_argument('--steps-per-epoch', type=int, default=4)
    p.add_argument('--lr0', type=float, default=0.01)
    p.add_argument('--momentum', type=float, default=0.937)
    p.add_argument('--weight-decay', type=float, default=5e-4)
    p.add_argument('--warmup-iters', type=int, default=3)
    p.add_argument('--seed', type=int, default=0)
    return p.parse_args(args)


def init_seeds(seed=0):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# ------------------------------------------------------------------------ modules
class Mish(nn.Module):
    def forward(self, x):
        return x * F.softplus(x).tanh()


class Conv(nn.Module):
    def __init__(self, c1, c2, k=1, s=1):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, k // 2, bias=False)
        self.bn = nn.BatchNorm2d(c2)
        self.act = Mish()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    def __init__(self, c1, c2, shortcut=True):
        super().__init__()
        self.cv1 = Conv(c1, c2, 1, 1)
        self.cv2 = Conv(c2, c2, 3, 1)
        self.add = shortcut and c1 == c2

    def forward(self, x):
        return x + self.cv2(self.cv1(x)) if self.add else self.cv2(self.cv1(x))


class BottleneckCSP(nn.Module):
    def __init__(self, c1, c2, n=1):
        super().__init__()
        c_ = c2 // 2
        self.cv1 = Conv(c1, c_, 1, 1)
        self.cv2 = nn.Conv2d(c1, c_, 1, 1, bias=False)
        self.cv3 = nn.Conv2d(c_, c_, 1, 1, bias=False)
        self.cv4 = Conv(2 * c_, c2, 1, 1)
        self.bn = nn.BatchNorm2d(2 * c_)
        self.act = Mish()
        self.m = nn.Sequential(*[Bottleneck(c_, c_) for _ in range(n)])

    def forward(self, x):
        y1 = self.cv3(self.m(self.cv1(x)))
        y2 = self.cv2(x)
        return self.cv4(self.act(self.bn(torch.cat((y1, y2), dim=1))))


class Detect(nn.Module):
    def __init__(self, nc, anchors, ch):
        super().__init__()
        self.nc = nc
        self.no = nc + 5
        self.nl = len(anchors)
        self.na = len(anchors[0]) // 2
        self.register_buffer('anchors', torch.tensor(anchors).float().view(self.nl, -1, 2))
        self.m = nn.ModuleList(nn.Conv2d(x, self.no * self.na, 1) for x in ch)
        self.stride = None

    def forward(self, xs):
        out = []
        for i in range(self.nl):
            x = self.m[i](xs[i])
            bs, _, ny, nx = x.shape
            out.append(x.view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous())
        return out


class Model(nn.Module):
    def __init__(self, cfg, ch=3, nc=None):
        super().__init__()
        self.yaml = deepcopy(cfg)
        if nc and nc != self.yaml['nc']:
            self.yaml['nc'] = nc
        layers, chs = [], [ch]
        for f, m, args in self.yaml['backbone']:
            c1 = chs[f]
            layer = Conv(c1, args[0], args[1], args[2]) if m == 'Conv' else BottleneckCSP(c1, args[0], args[1])
            layers.append(layer)
            chs.append(args[0])
        self.backbone = nn.ModuleList(layers)
        self.lateral = Conv(chs[-1], chs[-2], 1, 1)
        self.fuse = BottleneckCSP(chs[-2] * 2, chs[-2], 1)
        self.down = Conv(chs[-2], chs[-2], 3, 2)
        self.detect = Detect(self.yaml['nc'], self.yaml['anchors'], ch=[chs[-2], chs[-2]])
        s = 64
        self.detect.stride = torch.tensor([s / x.shape[-2] for x in self.forward(torch.zeros(1, ch, s, s))])
        self.detect.anchors /= self.detect.stride.view(-1, 1, 1)
        self.stride = self.detect.stride
        self._initialize_biases()  # only run once

    def forward(self, x):
        feats = []
        for layer in self.backbone:
            x = layer(x)
            feats.append(x)
        p4, p5 = feats[-2], feats[-1]
        up = F.interpolate(self.lateral(p5), size=p4.shape[-2:], mode='nearest')
        n4 = self.fuse(torch.cat([up, p4], 1))
        n5 = self.down(n4)
        return self.detect([n4, n5])

    def _initialize_biases(self, cf=None):  # initialize biases into Detect(), cf is class frequency
        m = self.detect
        for mi, s in zip(m.m, m.stride):
            b = mi.bias.view(m.na, -1)  # conv.bias(255) to (3,85)
            b[:, 4] += math.log(8 / (640 / s) ** 2)  # raises
            b[:, 5:] += math.log(0.6 / (m.nc - 0.99)) if cf is None else torch.log(cf / cf.sum())  # cls
            mi.bias = torch.nn.Parameter(b.view(-1), requires_grad=True)


# ----------------------------------------------------------------- train helpers
class ModelEMA:
    def __init__(self, model, decay=0.9999, updates=0):
        self.ema = deepcopy(model).eval()
        self.updates = updates
        self.decay = lambda x: decay * (1 - math.exp(-x / 2000))
        for p in self.ema.parameters():
            p.requires_grad_(False)

    def update(self, model):
        with torch.no_grad():
            self.updates += 1
            d = self.decay(self.updates)
            msd = model.state_dict()
            for k, v in self.ema.state_dict().items():
                if v.dtype.is_floating_point:
                    v *= d
                    v += (1. - d) * msd[k].detach()


def synthetic_pages(opt, nc):
    imgs = torch.rand(opt.batch_size, 3, opt.img_size, opt.img_size) * 0.2
    cls = torch.randint(0, nc, (opt.batch_size,))
    for i in range(opt.batch_size):
        y0, x0 = np.random.randint(0, opt.img_size // 2, 2)
        imgs[i, :, y0:y0 + 16, x0:x0 + 24] = 0.8 + 0.1 * cls[i]
    return imgs, cls


def compute_loss(preds, cls):
    lobj, lcls = 0., 0.
    for p in preds:
        obj = p[..., 4]
        tobj = torch.zeros_like(obj)
        tobj[:, 0, obj.shape[2] // 2, obj.shape[3] // 2] = 1.0
        lobj = lobj + F.binary_cross_entropy_with_logits(obj, tobj)
        lcls = lcls + F.cross_entropy(p[:, 0, obj.shape[2] // 2, obj.shape[3] // 2, 5:], cls)
    return lobj + 0.5 * lcls


def train(opt):
    init_seeds(opt.seed)
    model = Model(MODEL_CFG, ch=3, nc=MODEL_CFG['nc'])
    pg0, pg1, pg2 = [], [], []
    for k, v in model.named_parameters():
        if '.bias' in k:
            pg2.append(v)
        elif '.weight' in k and '.bn' not in k:
            pg1.append(v)
        else:
            pg0.append(v)
    optimizer = torch.optim.SGD(pg0, lr=opt.lr0, momentum=opt.momentum, nesterov=True)
    optimizer.add_param_group({'params': pg1, 'weight_decay': opt.weight_decay})
    optimizer.add_param_group({'params': pg2})
    lf = lambda x: (((1 + math.cos(x * math.pi / opt.epochs)) / 2) ** 1.0) * 0.8 + 0.2
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda=lf)
    ema = ModelEMA(model)
    ni = 0
    for epoch in range(opt.epochs):
        model.train()
        for _ in range(opt.steps_per_epoch):
            if ni < opt.warmup_iters:
                for j, x in enumerate(optimizer.param_groups):
                    x['lr'] = np.interp(ni, [0, opt.warmup_iters], [0.1 if j == 2 else 0.0, opt.lr0 * lf(epoch)])
            imgs, cls = synthetic_pages(opt, MODEL_CFG['nc'])
            loss = compute_loss(model(imgs), cls)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            ema.update(model)
            ni += 1
        scheduler.step()
        with torch.no_grad():
            imgs, cls = synthetic_pages(opt, MODEL_CFG['nc'])
            val_loss = compute_loss(ema.ema(imgs), cls).item()
        print(f"epoch {epoch}: train loss {loss.item():.4f} ema val loss {val_loss:.4f}")


def main():
    train(parse_opt([]))


if __name__ == '__main__':
    main()
