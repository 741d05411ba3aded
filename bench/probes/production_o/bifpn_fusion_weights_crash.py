# expect: leaf_inplace
# source: https://github.com/zylo117/Yet-Another-EfficientDet-Pytorch/issues/503
"""YOLO-style detector whose PANet concat nodes are replaced by BiFPN weighted
fusion (``Fusefeature``), as in the issue.  Swish is the memory-efficient
custom autograd version from efficientnet/utils.py; model / hyp / train loop
follow the usual yolov5 layout (models/common.py, models/yolo.py, train.py).
"""
import math
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
onnx_export = False

hyp = SimpleNamespace(lr0=0.01, momentum=0.937, weight_decay=5e-4, warmup_epochs=1.0,
                      box=0.05, obj=1.0, cls=0.5, anchor_t=4.0)
opt = SimpleNamespace(epochs=2, batch_size=4, imgsz=64, nc=3)


# ------------------------------------------------------------ efficientnet/utils.py
class SwishImplementation(torch.autograd.Function):
    @staticmethod
    def forward(ctx, i):
        result = i * torch.sigmoid(i)
        ctx.save_for_backward(i)
        return result

    @staticmethod
    def backward(ctx, grad_output):
        i = ctx.saved_tensors[0]
        sigmoid_i = torch.sigmoid(i)
        return grad_output * (sigmoid_i * (1 + i * (1 - sigmoid_i)))


class MemoryEfficientSwish(nn.Module):
    def forward(self, x):
        return SwishImplementation.apply(x)


class Swish(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(x)


# ------------------------------------------------------------ models/common.py
def autopad(k, p=None):
    return k // 2 if p is None else p


class Conv(nn.Module):
    # Standard convolution
    def __init__(self, c1, c2, k=1, s=1, p=None, act=True):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, autopad(k, p), bias=False)
        self.bn = nn.BatchNorm2d(c2)
        self.act = nn.ReLU(inplace=True) if act else nn.Identity()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Fusefeature(nn.Module):
    # replace concat with fusefeature
    def __init__(self, e=1e-4):    # concat, nums_input, epsilon, dimension
        super(Fusefeature, self).__init__()
        self.e = e
        self.weight = nn.Parameter(torch.ones(2, dtype=torch.float32), requires_grad=True)
        self.weight_relu = nn.ReLU(inplace=True)
        self.swish = MemoryEfficientSwish() if not onnx_export else Swish()

    def forward(self, x):
        weight = self.weight_relu(self.weight)  # raises
        weight = weight / (torch.sum(weight, dim=0) + self.e)
        return self.swish(weight[0] * x[0] + weight[1] * x[1])


class Detect(nn.Module):
    stride = torch.tensor([8., 16., 32.])

    def __init__(self, nc, anchors, ch):
        super().__init__()
        self.nc = nc
        self.no = nc + 5
        self.nl = len(anchors)
        self.na = len(anchors[0]) // 2
        self.register_buffer('anchors', torch.tensor(anchors).float().view(self.nl, -1, 2))
        self.m = nn.ModuleList(nn.Conv2d(x, self.no * self.na, 1) for x in ch)

    def forward(self, x):
        out = []
        for i in range(self.nl):
            xi = self.m[i](x[i])
            bs, _, ny, nx = xi.shape
            out.append(xi.view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous())
        return out


# ------------------------------------------------------------ models/yolo.py
class Model(nn.Module):
    def __init__(self, nc=3, width=16):
        super().__init__()
        w = width
        self.stem = Conv(3, w, 3, 2)
        self.p3 = nn.Sequential(Conv(w, w * 2, 3, 2), Conv(w * 2, w * 2, 3, 2))      # /8
        self.p4 = Conv(w * 2, w * 2, 3, 2)                                          # /16
        self.p5 = Conv(w * 2, w * 2, 3, 2)                                          # /32
        # top-down
        self.fuse_p4_td = Fusefeature()
        self.conv_p4_td = Conv(w * 2, w * 2, 3)
        self.fuse_p3_out = Fusefeature()
        self.conv_p3_out = Conv(w * 2, w * 2, 3)
        # bottom-up
        self.down_p3 = Conv(w * 2, w * 2, 3, 2)
        self.fuse_p4_out = Fusefeature()
        self.conv_p4_out = Conv(w * 2, w * 2, 3)
        self.down_p4 = Conv(w * 2, w * 2, 3, 2)
        self.fuse_p5_out = Fusefeature()
        self.conv_p5_out = Conv(w * 2, w * 2, 3)
        anchors = [[10, 13, 16, 30], [30, 61, 62, 45], [116, 90, 156, 198]]
        self.detect = Detect(nc, anchors, ch=[w * 2] * 3)
        self._initialize_biases()

    def _initialize_biases(self):
        for mi, s in zip(self.detect.m, self.detect.stride):
            b = mi.bias.view(self.detect.na, -1)
            b.data[:, 4] += math.log(8 / (640 / s) ** 2)
            b.data[:, 5:] += math.log(0.6 / (self.detect.nc - 0.99))

    def forward(self, x):
        p3 = self.p3(self.stem(x))
        p4 = self.p4(p3)
        p5 = self.p5(p4)
        up = lambda t, ref: F.interpolate(t, size=ref.shape[-2:], mode='nearest')
        p4_td = self.conv_p4_td(self.fuse_p4_td([p4, up(p5, p4)]))
        p3_out = self.conv_p3_out(self.fuse_p3_out([p3, up(p4_td, p3)]))
        p4_out = self.conv_p4_out(self.fuse_p4_out([p4_td, self.down_p3(p3_out)]))
        p5_out = self.conv_p5_out(self.fuse_p5_out([p5, self.down_p4(p4_out)]))
        return self.detect([p3_out, p4_out, p5_out])


# ------------------------------------------------------------ utils/loss.py
class ComputeLoss:
    def __init__(self, model):
        self.BCEcls = nn.BCEWithLogitsLoss()
        self.BCEobj = nn.BCEWithLogitsLoss()
        self.balance = [4.0, 1.0, 0.4]
        self.det = model.detect

    def __call__(self, p, targets):
        lcls, lbox, lobj = torch.zeros(1), torch.zeros(1), torch.zeros(1)
        for i, pi in enumerate(p):
            b, a, gj, gi, tcls, txy = self.build_targets(pi, targets, i)
            tobj = torch.zeros_like(pi[..., 0])
            ps = pi[b, a, gj, gi]
            pxy = ps[:, :2].sigmoid() * 2 - 0.5
            lbox += ((pxy - txy) ** 2).mean()
            tobj[b, a, gj, gi] = 1.0
            t = torch.zeros_like(ps[:, 5:])
            t[range(len(tcls)), tcls] = 1.0
            lcls += self.BCEcls(ps[:, 5:], t)
            lobj += self.BCEobj(pi[..., 4], tobj) * self.balance[i]
        bs = p[0].shape[0]
        loss = lbox * hyp.box + lobj * hyp.obj + lcls * hyp.cls
        return loss * bs, torch.cat((lbox, lobj, lcls)).detach()

    def build_targets(self, pi, targets, i):
        _, na, ny, nx, _ = pi.shape
        img_idx = targets[:, 0].long()
        gxy = targets[:, 2:4] * torch.tensor([nx, ny])
        gij = gxy.long().clamp(max=nx - 1)
        a = torch.zeros_like(img_idx)
        return img_idx, a, gij[:, 1], gij[:, 0], targets[:, 1].long(), gxy - gij


def smart_optimizer(model):
    g = [], [], []  # weights with decay, weights no-decay (BN / fusion), biases
    for v in model.modules():
        for p_name, p in v.named_parameters(recurse=False):
            if p_name == 'bias':
                g[2].append(p)
            elif p_name == 'weight' and isinstance(v, (nn.BatchNorm2d, Fusefeature)):
                g[1].append(p)
            else:
                g[0].append(p)
    optimizer = torch.optim.SGD(g[2], lr=hyp.lr0, momentum=hyp.momentum, nesterov=True)
    optimizer.add_param_group({'params': g[0], 'weight_decay': hyp.weight_decay})
    optimizer.add_param_group({'params': g[1], 'weight_decay': 0.0})
    return optimizer


def train():
    model = Model(nc=opt.nc)
    optimizer = smart_optimizer(model)
    compute_loss = ComputeLoss(model)
    nb = 3
    nw = max(round(hyp.warmup_epochs * nb), 2)
    for epoch in range(opt.epochs):
        model.train()
        mloss = torch.zeros(3)
        for i in range(nb):
            ni = i + nb * epoch
            imgs = torch.rand(opt.batch_size, 3, opt.imgsz, opt.imgsz)
            targets = torch.cat([torch.arange(opt.batch_size).float()[:, None],
                                 torch.randint(0, opt.nc, (opt.batch_size, 1)).float(),
                                 torch.rand(opt.batch_size, 4) * 0.8 + 0.1], 1)
            if ni <= nw:
                for x in optimizer.param_groups:
                    x['lr'] = hyp.lr0 * ni / nw
            pred = model(imgs)
            loss, loss_items = compute_loss(pred, targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            mloss = (mloss * i + loss_items) / (i + 1)
        print(f"{epoch}/{opt.epochs - 1} box {mloss[0]:.4f} obj {mloss[1]:.4f} cls {mloss[2]:.4f}")


train()
