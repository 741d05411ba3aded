# expect: leaf_inplace
# source: https://github.com/zymk9/yolov5_anime/issues/6
"""YOLOv5-style anime face detector: model construction and fine-tuning loop.

Mirrors the yolov5 code base the project forks: `hyp` dict and an `opt`
Namespace, a model built from a small yaml-like dict with a `Detect` head,
stride computation by a dry forward pass, prior bias initialisation of the
detection convolutions, weight init, parameter groups for SGD, a one-cycle
LambdaLR, a ModelEMA wrapper and a compact loss.  Synthetic images and
labels, CPU.
"""
import argparse
import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

hyp = {'lr0': 0.01, 'lrf': 0.2, 'momentum': 0.937, 'weight_decay': 0.0005,
       'box': 0.05, 'obj': 1.0, 'cls': 0.5, 'anchor_t': 4.0}

model_cfg = {
    'nc': 1,
    'anchors': [[10, 13, 16, 30, 33, 23], [30, 61, 62, 45, 59, 119]],
    'width': 16,
}


def make_divisible(x, divisor):
    return math.ceil(x / divisor) * divisor


class Conv(nn.Module):
    def __init__(self, c1, c2, k=1, s=1):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, k // 2, bias=False)
        self.bn = nn.BatchNorm2d(c2)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Detect(nn.Module):
    stride = None  # strides computed during build

    def __init__(self, nc=80, anchors=(), ch=()):
        super().__init__()
        self.nc = nc
        self.no = nc + 5
        self.nl = len(anchors)
        self.na = len(anchors[0]) // 2
        self.grid = [torch.zeros(1)] * self.nl
        a = torch.tensor(anchors).float().view(self.nl, -1, 2)
        self.register_buffer('anchors', a)
        self.m = nn.ModuleList(nn.Conv2d(x, self.no * self.na, 1) for x in ch)

    def forward(self, x):
        for i in range(self.nl):
            x[i] = self.m[i](x[i])
            bs, _, ny, nx = x[i].shape
            x[i] = x[i].view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
        return x


class Model(nn.Module):
    def __init__(self, cfg, ch=3, nc=None):
        super().__init__()
        self.yaml = copy.deepcopy(cfg)
        if nc and nc != self.yaml['nc']:
            print(f"Overriding model.yaml nc={self.yaml['nc']} with nc={nc}")
            self.yaml['nc'] = nc
        w = self.yaml['width']
        self.backbone = nn.ModuleList([Conv(ch, w, 3, 2), Conv(w, 2 * w, 3, 2), Conv(2 * w, 4 * w, 3, 2)])
        self.neck = nn.ModuleList([Conv(2 * w, 2 * w, 1), Conv(4 * w, 4 * w, 1)])
        self.detect = Detect(self.yaml['nc'], self.yaml['anchors'], ch=(2 * w, 4 * w))
        self.names = [str(i) for i in range(self.yaml['nc'])]

        # Build strides, anchors
        m = self.detect
        s = 64  # 2x min stride
        m.stride = torch.tensor([s / x.shape[-2] for x in self.forward(torch.zeros(1, ch, s, s))])
        m.anchors /= m.stride.view(-1, 1, 1)
        self.stride = m.stride
        self._initialize_biases()  # only run once
        initialize_weights(self)

    def forward(self, x):
        feats = []
        for i, layer in enumerate(self.backbone):
            x = layer(x)
            if i >= 1:
                feats.append(x)
        feats = [neck(f) for neck, f in zip(self.neck, feats)]
        return self.detect(feats)

    def _initialize_biases(self, cf=None):  # initialize biases into Detect(), cf is class frequency
        # https://arxiv.org/abs/1708.02002 section 3.3
        m = self.detect  # Detect() module
        for mi, s in zip(m.m, m.stride):  # from
            b = mi.bias.view(m.na, -1)  # conv.bias(255) to (3,85)
            b[:, 4] += math.log(8 / (640 / s) ** 2)  # raises
            b[:, 5:] += math.log(0.6 / (m.nc - 0.99)) if cf is None else torch.log(cf / cf.sum())  # cls
            mi.bias = torch.nn.Parameter(b.view(-1), requires_grad=True)


def initialize_weights(model):
    for m in model.modules():
        t = type(m)
        if t is nn.BatchNorm2d:
            m.eps = 1e-3
            m.momentum = 0.03
        elif t in [nn.Hardswish, nn.LeakyReLU, nn.ReLU, nn.ReLU6]:
            m.inplace = True


class ModelEMA:
    def __init__(self, model, decay=0.9999, updates=0):
        self.ema = copy.deepcopy(model).eval()
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


def compute_loss(preds, targets, model):
    """Compact objectness + box loss on the grid cell that holds each target."""
    lobj = torch.zeros(1)
    lbox = torch.zeros(1)
    for i, p in enumerate(preds):
        tobj = torch.zeros_like(p[..., 4])
        ny, nx = p.shape[2:4]
        for b, (cx, cy, w, h) in zip(targets[:, 0].long(), targets[:, 2:].tolist()):
            gi, gj = min(int(cx * nx), nx - 1), min(int(cy * ny), ny - 1)
            tobj[b, 0, gj, gi] = 1.0
            lbox += F.smooth_l1_loss(p[b, 0, gj, gi, 2:4].sigmoid(), torch.tensor([w, h]))
        lobj += F.binary_cross_entropy_with_logits(p[..., 4], tobj)
    loss = hyp['box'] * lbox + hyp['obj'] * lobj
    return loss, torch.cat((lbox, lobj)).detach()


def train(opt):
    torch.manual_seed(opt.seed)
    model = Model(model_cfg, ch=3, nc=opt.nc)
    pg0, pg1, pg2 = [], [], []  # optimizer parameter groups
    for k, v in model.named_modules():
        if hasattr(v, 'bias') and isinstance(v.bias, nn.Parameter):
            pg2.append(v.bias)  # biases
        if isinstance(v, nn.BatchNorm2d):
            pg0.append(v.weight)  # no decay
        elif hasattr(v, 'weight') and isinstance(v.weight, nn.Parameter):
            pg1.append(v.weight)  # apply decay
    optimizer = torch.optim.SGD(pg0, lr=hyp['lr0'], momentum=hyp['momentum'], nesterov=True)
    optimizer.add_param_group({'params': pg1, 'weight_decay': hyp['weight_decay']})
    optimizer.add_param_group({'params': pg2})
    lf = lambda x: ((1 + math.cos(x * math.pi / opt.epochs)) / 2) * (1 - hyp['lrf']) + hyp['lrf']
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda=lf)
    ema = ModelEMA(model)

    g = torch.Generator().manual_seed(opt.seed)
    for epoch in range(opt.epochs):
        model.train()
        for i in range(opt.iters):
            imgs = torch.rand(opt.batch_size, 3, opt.img_size, opt.img_size, generator=g)
            targets = torch.cat([torch.arange(opt.batch_size).float().unsqueeze(1),
                                 torch.zeros(opt.batch_size, 1),
                                 0.2 + 0.6 * torch.rand(opt.batch_size, 4, generator=g)], dim=1)
            pred = model(imgs)
            loss, loss_items = compute_loss(pred, targets, model)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            ema.update(model)
            print(f"epoch {epoch} iter {i} loss {loss.item():.4f} (box, obj) {loss_items.tolist()}")
        scheduler.step()
    return ema.ema


def parse_opt(argv=()):
    parser = argparse.ArgumentParser()
    parser.add_argument('--epochs', type=int, default=2)
    parser.add_argument('--iters', type=int, default=2)
    parser.add_argument('--batch-size', type=int, default=4)
    parser.add_argument('--img-size', type=int, default=64)
    parser.add_argument('--nc', type=int, default=20)
    parser.add_argument('--seed', type=int, default=0)
    return parser.parse_args(list(argv))


def main():
    train(parse_opt())


if __name__ == "__main__":
    main()
