# expect: leaf_inplace
# source: https://github.com/gengyanlei/fire-smoke-detect-yolov4/issues/33
"""YOLOv5 (2020 layout) fire/smoke detector: model built from a cfg dict,
Detect head with prior bias initialisation, SGD with three parameter groups,
cosine LR, ModelEMA. Small synthetic boxes stand in for the fire/smoke data.
"""
import math
from copy import deepcopy

import torch
import torch.nn as nn


def autopad(k, p=None):
    return k // 2 if p is None else p


def make_divisible(x, divisor):
    return math.ceil(x / divisor) * divisor


class Conv(nn.Module):
    def __init__(self, c1, c2, k=1, s=1, p=None, g=1, act=True):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, autopad(k, p), groups=g, bias=False)
        self.bn = nn.BatchNorm2d(c2)
        self.act = nn.Hardswish() if act else nn.Identity()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    def __init__(self, c1, c2, shortcut=True, g=1, e=0.5):
        super().__init__()
        c_ = int(c2 * e)
        self.cv1 = Conv(c1, c_, 1, 1)
        self.cv2 = Conv(c_, c2, 3, 1, g=g)
        self.add = shortcut and c1 == c2

    def forward(self, x):
        return x + self.cv2(self.cv1(x)) if self.add else self.cv2(self.cv1(x))


class BottleneckCSP(nn.Module):
    def __init__(self, c1, c2, n=1, shortcut=True, g=1, e=0.5):
        super().__init__()
        c_ = int(c2 * e)
        self.cv1 = Conv(c1, c_, 1, 1)
        self.cv2 = nn.Conv2d(c1, c_, 1, 1, bias=False)
        self.cv3 = nn.Conv2d(c_, c_, 1, 1, bias=False)
        self.cv4 = Conv(2 * c_, c2, 1, 1)
        self.bn = nn.BatchNorm2d(2 * c_)
        self.act = nn.LeakyReLU(0.1, inplace=True)
        self.m = nn.Sequential(*[Bottleneck(c_, c_, shortcut, g, e=1.0) for _ in range(n)])

    def forward(self, x):
        y1 = self.cv3(self.m(self.cv1(x)))
        y2 = self.cv2(x)
        return self.cv4(self.act(self.bn(torch.cat((y1, y2), dim=1))))


class SPP(nn.Module):
    def __init__(self, c1, c2, k=(5, 9, 13)):
        super().__init__()
        c_ = c1 // 2
        self.cv1 = Conv(c1, c_, 1, 1)
        self.cv2 = Conv(c_ * (len(k) + 1), c2, 1, 1)
        self.m = nn.ModuleList([nn.MaxPool2d(kernel_size=x, stride=1, padding=x // 2) for x in k])

    def forward(self, x):
        x = self.cv1(x)
        return self.cv2(torch.cat([x] + [m(x) for m in self.m], 1))


class Focus(nn.Module):
    def __init__(self, c1, c2, k=1, s=1, p=None, g=1, act=True):
        super().__init__()
        self.conv = Conv(c1 * 4, c2, k, s, p, g, act)

    def forward(self, x):
        return self.conv(torch.cat([x[..., ::2, ::2], x[..., 1::2, ::2],
                                    x[..., ::2, 1::2], x[..., 1::2, 1::2]], 1))


class Concat(nn.Module):
    def __init__(self, dimension=1):
        super().__init__()
        self.d = dimension

    def forward(self, x):
        return torch.cat(x, self.d)


class Detect(nn.Module):
    def __init__(self, nc=80, anchors=(), ch=()):
        super().__init__()
        self.stride = None
        self.nc = nc
        self.no = nc + 5
        self.nl = len(anchors)
        self.na = len(anchors[0]) // 2
        self.grid = [torch.zeros(1)] * self.nl
        a = torch.tensor(anchors).float().view(self.nl, -1, 2)
        self.register_buffer("anchors", a)
        self.register_buffer("anchor_grid", a.clone().view(self.nl, 1, -1, 1, 1, 2))
        self.m = nn.ModuleList(nn.Conv2d(x, self.no * self.na, 1) for x in ch)

    def forward(self, x):
        for i in range(self.nl):
            x[i] = self.m[i](x[i])
            bs, _, ny, nx = x[i].shape
            x[i] = x[i].view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
        return x


def parse_model(d, ch):
    anchors, nc, gd, gw = d["anchors"], d["nc"], d["depth_multiple"], d["width_multiple"]
    layers, save, c2 = [], [], ch[-1]
    for i, (f, n, m, args) in enumerate(d["backbone"] + d["head"]):
        m = eval(m) if isinstance(m, str) else m
        n = max(round(n * gd), 1) if n > 1 else n
        if m in [Conv, Bottleneck, SPP, Focus, BottleneckCSP]:
            c1, c2 = ch[f], args[0]
            c2 = make_divisible(c2 * gw, 8)
            args = [c1, c2, *args[1:]]
            if m is BottleneckCSP:
                args.insert(2, n)
                n = 1
        elif m is Concat:
            c2 = sum([ch[-1 if x == -1 else x + 1] for x in f])
        elif m is Detect:
            args.append([ch[x + 1] for x in f])
        else:
            c2 = ch[f]
        m_ = nn.Sequential(*[m(*args) for _ in range(n)]) if n > 1 else m(*args)
        m_.i, m_.f = i, f
        save.extend(x % i for x in ([f] if isinstance(f, int) else f) if x != -1)
        layers.append(m_)
        ch.append(c2)
    return nn.Sequential(*layers), sorted(save)


class Model(nn.Module):
    def __init__(self, cfg, ch=3, nc=None):
        super().__init__()
        self.yaml = deepcopy(cfg)
        if nc and nc != self.yaml["nc"]:
            self.yaml["nc"] = nc
        self.model, self.save = parse_model(deepcopy(self.yaml), ch=[ch])

        # Build strides, anchors
        m = self.model[-1]
        if isinstance(m, Detect):
            s = 128
            m.stride = torch.tensor([s / x.shape[-2] for x in self.forward(torch.zeros(1, ch, s, s))])
            m.anchors /= m.stride.view(-1, 1, 1)
            self.stride = m.stride
            self._initialize_biases()  # only run once
        initialize_weights(self)

    def forward(self, x):
        y = []
        for m in self.model:
            if m.f != -1:
                x = y[m.f] if isinstance(m.f, int) else [x if j == -1 else y[j] for j in m.f]
            x = m(x)
            y.append(x if m.i in self.save else None)
        return x

    def _initialize_biases(self, cf=None):  # initialize biases into Detect(), cf is class frequency
        m = self.model[-1]  # Detect() module
        for mi, s in zip(m.m, m.stride):  # from
            b = mi.bias.view(m.na, -1)  # conv.bias(255) to (3,85)
            # obj (8 objects per 640 image)
            b[:, 4] += math.log(8 / (640 / s) ** 2)  # raises
            b[:, 5:] += math.log(0.6 / (m.nc - 0.99)) if cf is None else torch.log(cf / cf.sum())  # cls
            mi.bias = torch.nn.Parameter(b.view(-1), requires_grad=True)


def initialize_weights(model):
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.eps, m.momentum = 1e-3, 0.03
        elif isinstance(m, (nn.Hardswish, nn.LeakyReLU, nn.ReLU)):
            m.inplace = True


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


def compute_loss(p, targets, model, hyp):
    det = model.model[-1]
    bce = nn.BCEWithLogitsLoss()
    lbox, lobj, lcls = torch.zeros(1), torch.zeros(1), torch.zeros(1)
    for i, pi in enumerate(p):
        anchors = det.anchors[i]
        ny, nx = pi.shape[2:4]
        tobj = torch.zeros_like(pi[..., 0])
        gxy = targets[:, 2:4] * torch.tensor([nx, ny])
        gwh = targets[:, 4:6] * torch.tensor([nx, ny])
        r = gwh[:, None] / anchors[None]
        j = torch.max(r, 1. / r).max(2)[0] < hyp["anchor_t"]  # compare
        if j.any():
            t_idx, a_idx = j.nonzero(as_tuple=True)
            b, c = targets[t_idx, 0].long(), targets[t_idx, 1].long()
            gi, gj = gxy[t_idx].long().T
            ps = pi[b, a_idx, gj.clamp(0, ny - 1), gi.clamp(0, nx - 1)]
            pxy = ps[:, :2].sigmoid() * 2. - 0.5
            pwh = (ps[:, 2:4].sigmoid() * 2) ** 2 * anchors[a_idx]
            tbox = torch.cat((gxy[t_idx] - gxy[t_idx].floor(), gwh[t_idx]), 1)
            lbox = lbox + (torch.cat((pxy, pwh), 1) - tbox).abs().mean()
            tobj[b, a_idx, gj.clamp(0, ny - 1), gi.clamp(0, nx - 1)] = 1.0
            tcls = torch.zeros_like(ps[:, 5:])
            tcls[range(len(c)), c] = 1.0
            lcls = lcls + bce(ps[:, 5:], tcls)
        lobj = lobj + bce(pi[..., 4], tobj)
    bs = p[0].shape[0]
    loss = lbox * hyp["box"] + lobj * hyp["obj"] + lcls * hyp["cls"]
    return loss * bs, torch.cat((lbox, lobj, lcls, loss)).detach()


def synthetic_batch(g, bs, img_size, nc):
    imgs = torch.rand(bs, 3, img_size, img_size, generator=g)
    n = 3
    cls = torch.randint(0, nc, (bs * n, 1), generator=g).float()
    xy = torch.rand(bs * n, 2, generator=g) * 0.8 + 0.1
    wh = torch.rand(bs * n, 2, generator=g) * 0.2 + 0.05
    img_idx = torch.arange(bs).repeat_interleave(n).float().view(-1, 1)
    return imgs, torch.cat([img_idx, cls, xy, wh], 1)


def train(hyp, opt):
    cfg = {"nc": 2, "depth_multiple": 0.33, "width_multiple": 0.25,
           "anchors": [[10, 13, 16, 30, 33, 23], [30, 61, 62, 45, 59, 119]],
           "backbone": [[-1, 1, "Focus", [32, 3]], [-1, 1, "Conv", [64, 3, 2]],
                        [-1, 3, "BottleneckCSP", [64]], [-1, 1, "Conv", [128, 3, 2]],
                        [-1, 3, "BottleneckCSP", [128]], [-1, 1, "Conv", [256, 3, 2]],
                        [-1, 1, "SPP", [256, [5, 9, 13]]]],
           "head": [[-1, 1, "Conv", [128, 1, 1]], [-1, 1, "nn.Upsample", [None, 2, "nearest"]],
                    [[-1, 4], 1, "Concat", [1]], [-1, 1, "BottleneckCSP", [128, False]],
                    [-1, 1, "Conv", [128, 3, 2]], [[-1, 7], 1, "Concat", [1]],
                    [-1, 1, "BottleneckCSP", [256, False]], [[10, 13], 1, "Detect", ["nc", "anchors"]]]}
    cfg["head"][-1][3] = [cfg["nc"], cfg["anchors"]]
    model = Model(cfg, ch=3, nc=opt["nc"])

    pg0, pg1, pg2 = [], [], []  # optimizer parameter groups
    for k, v in model.named_parameters():
        if ".bias" in k:
            pg2.append(v)
        elif ".weight" in k and ".bn" not in k:
            pg1.append(v)
        else:
            pg0.append(v)
    optimizer = torch.optim.SGD(pg0, lr=hyp["lr0"], momentum=hyp["momentum"], nesterov=True)
    optimizer.add_param_group({"params": pg1, "weight_decay": hyp["weight_decay"]})
    optimizer.add_param_group({"params": pg2})
    lf = lambda x: ((1 + math.cos(x * math.pi / opt["epochs"])) / 2) * (1 - hyp["lrf"]) + hyp["lrf"]
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda=lf)
    ema = ModelEMA(model)

    g = torch.Generator().manual_seed(0)
    for epoch in range(opt["epochs"]):
        model.train()
        for i in range(opt["batches"]):
            imgs, targets = synthetic_batch(g, opt["batch_size"], opt["img_size"], opt["nc"])
            pred = model(imgs)
            loss, loss_items = compute_loss(pred, targets, model, hyp)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            ema.update(model)
        scheduler.step()
        print("epoch {} box {:.4f} obj {:.4f} cls {:.4f}".format(epoch, *loss_items[:3].tolist()))


if __name__ == "__main__":
    torch.manual_seed(0)
    hyp = {"lr0": 0.01, "lrf": 0.2, "momentum": 0.937, "weight_decay": 5e-4, "box": 0.05,
           "obj": 1.0, "cls": 0.5, "anchor_t": 4.0}
    train(hyp, {"nc": 2, "epochs": 2, "batches": 3, "batch_size": 2, "img_size": 64})
