# expect: clean
# source: https://github.com/xhwNobody/yolov5_prune_sfp/issues/17
"""Soft Filter Pruning (SFP) of a YOLOv5-style detector.

A compact YOLOv5-like model (Conv/C3 backbone, two-scale Detect head with
anchors) is trained on synthetic box data; at the end of every epoch a Mask
object zeroes the filters with the smallest L2 norm in each prunable conv
layer (soft pruning: the filters can grow back during the next epoch), as in
train_prune_sfp.py of the original repository.  Model construction follows
models/yolo.py: strides are inferred with a dummy forward and the Detect
biases are initialised from class/object priors.
"""
import argparse
import math

import numpy as np
import torch
import torch.nn as nn


def get_opt(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--nc", type=int, default=3)
    p.add_argument("--img_size", type=int, default=32)
    p.add_argument("--batch_size", type=int, default=4)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batches", type=int, default=3)
    p.add_argument("--lr0", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.937)
    p.add_argument("--weight_decay", type=float, default=5e-4)
    p.add_argument("--compress_rate", type=float, default=0.7)
    p.add_argument("--skip_layers", type=int, default=2)
    return p.parse_args(argv)


def autopad(k, p=None):
    return k // 2 if p is None else p


class Conv(nn.Module):
    def __init__(self, c1, c2, k=1, s=1, p=None):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, autopad(k, p), bias=False)
        self.bn = nn.BatchNorm2d(c2)
        self.act = nn.SiLU()

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


class C3(nn.Module):
    def __init__(self, c1, c2, n=1):
        super().__init__()
        c_ = c2 // 2
        self.cv1 = Conv(c1, c_, 1, 1)
        self.cv2 = Conv(c1, c_, 1, 1)
        self.cv3 = Conv(2 * c_, c2, 1)
        self.m = nn.Sequential(*[Bottleneck(c_, c_) for _ in range(n)])

    def forward(self, x):
        return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), dim=1))


class Detect(nn.Module):
    def __init__(self, nc=80, anchors=(), ch=()):
        super().__init__()
        self.nc = nc
        self.no = nc + 5
        self.nl = len(anchors)
        self.na = len(anchors[0]) // 2
        self.register_buffer("anchors", torch.tensor(anchors).float().view(self.nl, -1, 2))
        self.m = nn.ModuleList(nn.Conv2d(x, self.no * self.na, 1) for x in ch)
        self.stride = None

    def forward(self, x):
        out = []
        for i in range(self.nl):
            y = self.m[i](x[i])
            bs, _, ny, nx = y.shape
            out.append(y.view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous())
        return out


class Model(nn.Module):
    def __init__(self, nc=80, ch=3, anchors=((10, 13, 16, 30, 33, 23), (30, 61, 62, 45, 59, 119))):
        super().__init__()
        self.backbone = nn.ModuleList([Conv(ch, 16, 3, 2), Conv(16, 32, 3, 2), C3(32, 32),
                                       Conv(32, 64, 3, 2), C3(64, 64), Conv(64, 64, 3, 2)])
        self.head = Detect(nc, anchors, ch=(64, 64))
        s = 64
        self.head.stride = torch.tensor([s / x.shape[-3] for x in self.forward(torch.zeros(1, ch, s, s))])
        self.head.anchors /= self.head.stride.view(-1, 1, 1)
        self.stride = self.head.stride
        self._initialize_biases()

    def forward(self, x):
        feats = []
        for i, m in enumerate(self.backbone):
            x = m(x)
            if i in (4, 5):
                feats.append(x)
        return self.head(feats)

    def _initialize_biases(self, cf=None):
        m = self.head
        for mi, s in zip(m.m, m.stride):
            b = mi.bias.view(m.na, -1)
            with torch.no_grad():
                b[:, 4] += math.log(8 / (640 / s) ** 2)
                b[:, 5:] += math.log(0.6 / (m.nc - 0.99)) if cf is None else torch.log(cf / cf.sum())
            mi.bias = torch.nn.Parameter(b.view(-1), requires_grad=True)


def compute_loss(pred, targets, model):
    """Simplified YOLO loss: objectness on every cell, box/cls on assigned cells."""
    bce = nn.BCEWithLogitsLoss()
    lbox, lobj, lcls = torch.zeros(1), torch.zeros(1), torch.zeros(1)
    for i, p in enumerate(pred):
        bs, na, ny, nx, no = p.shape
        tobj = torch.zeros(bs, na, ny, nx)
        for t in targets:
            b, c, x, y = int(t[0]), int(t[1]), float(t[2]), float(t[3])
            gi, gj = min(int(x * nx), nx - 1), min(int(y * ny), ny - 1)
            tobj[b, :, gj, gi] = 1.0
            ps = p[b, :, gj, gi]
            pxy = ps[:, :2].sigmoid()
            lbox = lbox + (pxy - torch.tensor([x * nx - gi, y * ny - gj])).abs().mean()
            tcls = torch.zeros_like(ps[:, 5:])
            tcls[:, c] = 1.0
            lcls = lcls + bce(ps[:, 5:], tcls)
        lobj = lobj + bce(p[..., 4], tobj)
    loss = 0.05 * lbox + 1.0 * lobj + 0.5 * lcls
    return loss * len(pred), torch.cat((lbox, lobj, lcls, loss)).detach()


class Mask:
    """Soft filter pruning by L2 norm (Mask object of train_prune_sfp.py)."""

    def __init__(self, model):
        self.model = model
        self.mat = {}
        self.model_length = {}
        self.compress_rate = {}

    def prunable(self):
        return [(n, p) for n, p in self.model.named_parameters() if p.dim() == 4 and "head" not in n]

    def init_length(self):
        for name, p in self.prunable():
            self.model_length[name] = p.numel()

    def get_filter_codebook(self, weight, rate):
        codebook = torch.ones(weight.numel())
        filter_pruned_num = int(weight.size(0) * (1 - rate))
        norm2 = weight.view(weight.size(0), -1).norm(2, 1).cpu().numpy()
        filter_index = norm2.argsort()[:filter_pruned_num]
        kernel_length = weight[0].numel()
        for x in filter_index:
            codebook[x * kernel_length:(x + 1) * kernel_length] = 0
        return codebook

    def init_mask(self, rate, skip):
        for idx, (name, p) in enumerate(self.prunable()):
            r = 1.0 if idx < skip else rate
            self.mat[name] = self.get_filter_codebook(p.data, r)

    def do_mask(self):
        for name, p in self.prunable():
            p.data = (p.data.view(-1) * self.mat[name]).view_as(p.data)

    def if_zero(self):
        return {n: int((p.data.view(p.size(0), -1).abs().sum(1) == 0).sum()) for n, p in self.prunable()}


class Trainer:
    def __init__(self, model, opt):
        self.model, self.opt = model, opt
        pg0, pg1, pg2 = [], [], []
        for k, v in model.named_parameters():
            if ".bias" in k:
                pg2.append(v)
            elif ".weight" in k and ".bn" not in k:
                pg1.append(v)
            else:
                pg0.append(v)
        self.optimizer = torch.optim.SGD(pg0, lr=opt.lr0, momentum=opt.momentum, nesterov=True)
        self.optimizer.add_param_group({"params": pg1, "weight_decay": opt.weight_decay})
        self.optimizer.add_param_group({"params": pg2})
        lf = lambda x: ((1 + math.cos(x * math.pi / opt.epochs)) / 2) * 0.8 + 0.2
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_lambda=lf)
        self.mask = Mask(model)
        self.mask.init_length()

    def synthetic_batch(self):
        imgs = torch.rand(self.opt.batch_size, 3, self.opt.img_size, self.opt.img_size)
        rows = [[b, np.random.randint(self.opt.nc), np.random.rand(), np.random.rand()]
                for b in range(self.opt.batch_size) for _ in range(2)]
        return imgs, torch.tensor(rows)

    def train_step(self, imgs, targets):
        pred = self.model(imgs)
        loss, loss_items = compute_loss(pred, targets, self.model)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss_items

    @torch.no_grad()
    def evaluate(self):
        self.model.eval()
        imgs, targets = self.synthetic_batch()
        _, items = compute_loss(self.model(imgs), targets, self.model)
        self.model.train()
        return items

    def fit(self):
        for epoch in range(self.opt.epochs):
            self.model.train()
            for _ in range(self.opt.batches):
                self.train_step(*self.synthetic_batch())
            self.scheduler.step()
            self.mask.model = self.model
            self.mask.init_mask(self.opt.compress_rate, self.opt.skip_layers)
            self.mask.do_mask()
            zeros = self.mask.if_zero()
            print("epoch %d  val loss %.4f  zeroed filters %d"
                  % (epoch, self.evaluate()[-1].item(), sum(zeros.values())))


def main():
    torch.manual_seed(0)
    np.random.seed(0)
    opt = get_opt([])
    model = Model(nc=opt.nc)
    Trainer(model, opt).fit()


if __name__ == "__main__":
    main()
