# expect: leaf_inplace
# source: https://github.com/DataXujing/YOLO-v5/issues/23
"""YOLOv5-style single-stage detector for lesion detection on CT slices.

The model is built from a yaml-like dict (backbone/head lists parsed by
parse_model), strides are inferred with a dummy forward pass, and the Detect
layer biases are initialised with class/objectness priors before training.
Training uses synthetic 64x64 slices with bright elliptical "lesions".
"""
import math
from copy import deepcopy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MODEL_CFG = {
    "nc": 2,
    "depth_multiple": 0.33,
    "width_multiple": 0.25,
    "anchors": [[4, 5, 8, 10, 12, 14], [16, 20, 24, 28, 32, 40]],
    "backbone": [
        [-1, 1, "Conv", [64, 3, 2]],
        [-1, 1, "Conv", [128, 3, 2]],
        [-1, 3, "C3", [128]],
        [-1, 1, "Conv", [256, 3, 2]],
        [-1, 3, "C3", [256]],
        [-1, 1, "SPPF", [256, 5]],
    ],
    "head": [
        [-1, 1, "Conv", [128, 1, 1]],
        [-1, 1, "nn.Upsample", [None, 2, "nearest"]],
        [[-1, 2], 1, "Concat", [1]],
        [-1, 1, "C3", [128]],
        [[9, 5], 1, "Detect", ["nc", "anchors"]],
    ],
}
HYP = dict(lr0=0.01, momentum=0.9, weight_decay=5e-4, box=0.05, obj=1.0, cls=0.5, epochs=2, batch=4)


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
        self.cv1, self.cv2, self.cv3 = Conv(c1, c_), Conv(c1, c_), Conv(2 * c_, c2)
        self.m = nn.Sequential(*(Bottleneck(c_, c_) for _ in range(n)))

    def forward(self, x):
        return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), 1))


class SPPF(nn.Module):
    def __init__(self, c1, c2, k=5):
        super().__init__()
        c_ = c1 // 2
        self.cv1, self.cv2 = Conv(c1, c_), Conv(c_ * 4, c2)
        self.m = nn.MaxPool2d(k, 1, k // 2)

    def forward(self, x):
        x = self.cv1(x)
        y1 = self.m(x)
        y2 = self.m(y1)
        return self.cv2(torch.cat((x, y1, y2, self.m(y2)), 1))


class Concat(nn.Module):
    def __init__(self, d=1):
        super().__init__()
        self.d = d

    def forward(self, x):
        return torch.cat(x, self.d)


class Detect(nn.Module):
    stride = None

    def __init__(self, nc, anchors, ch):
        super().__init__()
        self.nc, self.no, self.nl = nc, nc + 5, len(anchors)
        self.na = len(anchors[0]) // 2
        self.register_buffer("anchors", torch.tensor(anchors).float().view(self.nl, -1, 2))
        self.m = nn.ModuleList(nn.Conv2d(x, self.no * self.na, 1) for x in ch)

    def forward(self, x):
        out = []
        for i in range(self.nl):
            bs, _, ny, nx = x[i].shape
            out.append(self.m[i](x[i]).view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous())
        return out


def make_divisible(x, divisor=8):
    return math.ceil(x / divisor) * divisor


def parse_model(d, ch):
    nc, gd, gw = d["nc"], d["depth_multiple"], d["width_multiple"]
    layers, save, c2 = [], [], ch[-1]
    for i, (f, n, m, args) in enumerate(d["backbone"] + d["head"]):
        m = eval(m) if isinstance(m, str) else m
        args = [nc if a == "nc" else d["anchors"] if a == "anchors" else a for a in args]
        n = max(round(n * gd), 1) if n > 1 else n
        if m in (Conv, C3, SPPF):
            c1, c2 = ch[f], make_divisible(args[0] * gw)
            args = [c1, c2, *args[1:]]
            if m is C3:
                args.insert(2, n)
                n = 1
        elif m is Concat:
            c2 = sum(ch[x] for x in f)
        elif m is Detect:
            args.append([ch[x] for x in f])
        else:
            c2 = ch[f]
        m_ = nn.Sequential(*(m(*args) for _ in range(n))) if n > 1 else m(*args)
        m_.i, m_.f = i, f
        save.extend(x % i for x in ([f] if isinstance(f, int) else f) if x != -1)
        layers.append(m_)
        if i == 0:
            ch = []
        ch.append(c2)
    return nn.Sequential(*layers), sorted(save)


class Model(nn.Module):
    def __init__(self, cfg, ch=1):
        super().__init__()
        self.yaml = deepcopy(cfg)
        self.model, self.save = parse_model(self.yaml, ch=[ch])
        m = self.model[-1]
        s = 64
        m.stride = torch.tensor([s / x.shape[-2] for x in self.forward(torch.zeros(1, ch, s, s))])
        m.anchors /= m.stride.view(-1, 1, 1)
        self.stride = m.stride
        self._initialize_biases()

    def forward(self, x):
        y = []
        for m in self.model:
            if m.f != -1:
                x = y[m.f] if isinstance(m.f, int) else [x if j == -1 else y[j] for j in m.f]
            x = m(x)
            y.append(x if m.i in self.save else None)
        return x

    def _initialize_biases(self, cf=None):
        m = self.model[-1]
        for mi, s in zip(m.m, m.stride):
            b = mi.bias.view(m.na, -1)
            b[:, 4] += math.log(8 / (64 / s) ** 2)  # raises
            b[:, 5:] += math.log(0.6 / (m.nc - 0.99)) if cf is None else torch.log(cf / cf.sum())
            mi.bias = torch.nn.Parameter(b.view(-1), requires_grad=True)


class ComputeLoss:
    def __init__(self, model, hyp):
        self.hyp = hyp
        self.det = model.model[-1]
        self.bce = nn.BCEWithLogitsLoss()

    def __call__(self, preds, targets):
        lbox = lobj = lcls = torch.zeros(1)
        for i, p in enumerate(preds):
            tobj = torch.zeros_like(p[..., 4])
            gain = torch.tensor(p.shape)[[3, 2]].float()
            for img, cls, cx, cy, w, h in targets.tolist():
                gx, gy = int(cx * gain[0]), int(cy * gain[1])
                ps = p[int(img), :, gy, gx]
                pwh = ps[:, 2:4].sigmoid() * 2
                lbox = lbox + (pwh - torch.tensor([w, h]) * gain).abs().mean()
                tobj[int(img), :, gy, gx] = 1.0
                t = torch.zeros_like(ps[:, 5:])
                t[:, int(cls)] = 1.0
                lcls = lcls + self.bce(ps[:, 5:], t)
            lobj = lobj + self.bce(p[..., 4], tobj)
        return (lbox * self.hyp["box"] + lobj * self.hyp["obj"] + lcls * self.hyp["cls"]).sum()


def synthetic_ct_batch(batch, gen):
    imgs = torch.randn(batch, 1, 64, 64, generator=gen) * 0.05
    targets = []
    yy, xx = torch.meshgrid(torch.arange(64.0), torch.arange(64.0), indexing="ij")
    for i in range(batch):
        cx, cy = (torch.rand(2, generator=gen) * 40 + 12).tolist()
        r = float(torch.rand(1, generator=gen) * 5 + 3)
        imgs[i, 0] += (((xx - cx) ** 2 + (yy - cy) ** 2) < r ** 2).float()
        targets.append([i, int(r > 5.5), cx / 64, cy / 64, 2 * r / 64, 2 * r / 64])
    return imgs, torch.tensor(targets)


def train(model, hyp):
    g = [p for n, p in model.named_parameters() if n.endswith(".bias")]
    w = [p for n, p in model.named_parameters() if not n.endswith(".bias")]
    optimizer = torch.optim.SGD(g, lr=hyp["lr0"], momentum=hyp["momentum"], nesterov=True)
    optimizer.add_param_group({"params": w, "weight_decay": hyp["weight_decay"]})
    lf = lambda x: (1 - x / hyp["epochs"]) * 0.9 + 0.1
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda=lf)
    compute_loss = ComputeLoss(model, hyp)
    gen = torch.Generator().manual_seed(0)
    for epoch in range(hyp["epochs"]):
        model.train()
        for _ in range(3):
            imgs, targets = synthetic_ct_batch(hyp["batch"], gen)
            loss = compute_loss(model(imgs), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        scheduler.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")


def main():
    torch.manual_seed(0)
    np.random.seed(0)
    model = Model(MODEL_CFG, ch=1)
    train(model, HYP)


if __name__ == "__main__":
    main()
