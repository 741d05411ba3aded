# expect: clean
# source: https://github.com/OpenFirework/pytorch_solov2/issues/22
"""SOLOv2 instance segmentation training, in the layout of OpenFirework/pytorch_solov2:
an mmdet-style cfg object, a small ResNet backbone + FPN, MaskFeatHead (unified mask
feature branch with CoordConv on the coarsest level), SOLOv2Head (category and
dynamic-kernel branches over an S x S grid), Dice + focal losses, and the repo's
train() loop with linear warm-up, step lr, set_lr/get_warmup_lr helpers and
gradient clipping. Synthetic images with square instances replace COCO."""
import time
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.nn.utils import clip_grad

torch.manual_seed(0)
np.random.seed(0)

cfg = SimpleNamespace(
    backbone=SimpleNamespace(name="resnet_lite", out_channels=(16, 32, 64, 64)),
    fpn=dict(in_channels=[16, 32, 64, 64], out_channels=32, num_outs=4),
    mask_feature_head=dict(in_channels=32, out_channels=32, start_level=0, end_level=3, num_classes=32),
    bbox_head=dict(num_classes=4, in_channels=32, seg_feat_channels=32, stacked_convs=2,
                   num_grids=[8, 6, 4, 3], ins_out_channels=32),
    optimizer=dict(type="SGD", lr=0.01, momentum=0.9, weight_decay=0.0001),
    lr_config=dict(policy="step", warmup="linear", warmup_iters=3, warmup_ratio=0.1, step=[27, 33]),
    imgs_per_gpu=2, total_epoch=2, epoch_iters_start=1, img_size=64,
)


def normal_init(module, std=0.01, bias=0.0):
    nn.init.normal_(module.weight, 0, std)
    if getattr(module, "bias", None) is not None:
        nn.init.constant_(module.bias, bias)


def conv_gn_relu(cin, cout, k=3, s=1):
    return nn.Sequential(nn.Conv2d(cin, cout, k, s, k // 2, bias=False),
                         nn.GroupNorm(num_channels=cout, num_groups=8), nn.ReLU(inplace=False))


class ResNetLite(nn.Module):
    def __init__(self, chans):
        super().__init__()
        self.stem = conv_gn_relu(3, chans[0], 3, 2)
        self.stages = nn.ModuleList()
        cin = chans[0]
        for i, c in enumerate(chans):
            self.stages.append(conv_gn_relu(cin, c, 3, 1 if i == 0 else 2))
            cin = c

    def forward(self, x):
        x = self.stem(x)
        outs = []
        for stage in self.stages:
            x = stage(x)
            outs.append(x)
        return outs


class FPN(nn.Module):
    def __init__(self, in_channels, out_channels, num_outs):
        super().__init__()
        self.lateral = nn.ModuleList([nn.Conv2d(c, out_channels, 1) for c in in_channels])
        self.fpn = nn.ModuleList([nn.Conv2d(out_channels, out_channels, 3, padding=1) for _ in in_channels])

    def forward(self, inputs):
        lat = [l(x) for l, x in zip(self.lateral, inputs)]
        for i in range(len(lat) - 1, 0, -1):
            lat[i - 1] = lat[i - 1] + F.interpolate(lat[i], size=lat[i - 1].shape[-2:], mode="nearest")
        return [f(x) for f, x in zip(self.fpn, lat)]


class MaskFeatHead(nn.Module):
    def __init__(self, in_channels, out_channels, start_level, end_level, num_classes):
        super().__init__()
        self.start_level, self.end_level = start_level, end_level
        self.convs_all_levels = nn.ModuleList()
        for i in range(start_level, end_level + 1):
            convs_per_level = nn.Sequential()
            if i == 0:
                convs_per_level.add_module("conv0", conv_gn_relu(in_channels, out_channels))
                self.convs_all_levels.append(convs_per_level)
                continue
            for j in range(i):
                chn = (in_channels + 2 if i == 3 else in_channels) if j == 0 else out_channels
                convs_per_level.add_module("conv" + str(j), conv_gn_relu(chn, out_channels))
                convs_per_level.add_module("upsample" + str(j), nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False))
            self.convs_all_levels.append(convs_per_level)
        self.conv_pred = nn.Sequential(nn.Conv2d(out_channels, num_classes, 1, bias=False),
                                       nn.GroupNorm(num_channels=num_classes, num_groups=8), nn.ReLU(inplace=True))

    def init_weights(self):
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                normal_init(m, std=0.01)

    def forward(self, inputs):
        assert len(inputs) == (self.end_level - self.start_level + 1)
        feature_add_all_level = self.convs_all_levels[0](inputs[0])
        for i in range(1, len(inputs)):
            input_p = inputs[i]
            if i == 3:
                x_range = torch.linspace(-1, 1, input_p.shape[-1])
                y_range = torch.linspace(-1, 1, input_p.shape[-2])
                y, x = torch.meshgrid(y_range, x_range, indexing="ij")
                y = y.expand([input_p.shape[0], 1, -1, -1])
                x = x.expand([input_p.shape[0], 1, -1, -1])
                input_p = torch.cat([input_p, torch.cat([x, y], 1)], 1)
            feature_add_all_level = self.convs_all_levels[i](input_p) + feature_add_all_level
        return self.conv_pred(feature_add_all_level)


class SOLOv2Head(nn.Module):
    def __init__(self, num_classes, in_channels, seg_feat_channels, stacked_convs, num_grids, ins_out_channels):
        super().__init__()
        self.num_classes, self.seg_num_grids = num_classes, num_grids
        self.kernel_out_channels = ins_out_channels
        self.kernel_convs = nn.Sequential(*[conv_gn_relu(in_channels + 2 if i == 0 else seg_feat_channels, seg_feat_channels) for i in range(stacked_convs)])
        self.cate_convs = nn.Sequential(*[conv_gn_relu(in_channels if i == 0 else seg_feat_channels, seg_feat_channels) for i in range(stacked_convs)])
        self.solo_kernel = nn.Conv2d(seg_feat_channels, self.kernel_out_channels, 3, padding=1)
        self.solo_cate = nn.Conv2d(seg_feat_channels, num_classes, 3, padding=1)
        normal_init(self.solo_cate, std=0.01, bias=float(-np.log((1 - 0.01) / 0.01)))

    def forward_single(self, x, idx):
        xr = torch.linspace(-1, 1, x.shape[-1])
        yr = torch.linspace(-1, 1, x.shape[-2])
        y, xx = torch.meshgrid(yr, xr, indexing="ij")
        coord = torch.stack([xx, y]).expand(x.shape[0], -1, -1, -1)
        kernel_feat = F.interpolate(torch.cat([x, coord], 1), size=self.seg_num_grids[idx], mode="bilinear", align_corners=False)
        cate_feat = kernel_feat[:, :-2, :, :]
        kernel_pred = self.solo_kernel(self.kernel_convs(kernel_feat))
        cate_pred = self.solo_cate(self.cate_convs(cate_feat))
        return cate_pred, kernel_pred

    def forward(self, feats):
        return [self.forward_single(f, i) for i, f in enumerate(feats)]


def dice_loss(inputs, target):
    inputs = inputs.contiguous().view(inputs.size(0), -1)
    target = target.contiguous().view(target.size(0), -1).float()
    a = torch.sum(inputs * target, 1)
    b = torch.sum(inputs * inputs, 1) + 0.001
    c = torch.sum(target * target, 1) + 0.001
    return 1 - 2 * a / (b + c)


def sigmoid_focal_loss(pred, target, gamma=2.0, alpha=0.25):
    p = pred.sigmoid()
    ce = F.binary_cross_entropy_with_logits(pred, target, reduction="none")
    p_t = p * target + (1 - p) * (1 - target)
    loss = ce * ((1 - p_t) ** gamma)
    return (alpha * target + (1 - alpha) * (1 - target)) * loss


class SOLOV2(nn.Module):
    def __init__(self, cfg, mode="train"):
        super().__init__()
        self.backbone = ResNetLite(cfg.backbone.out_channels)
        self.fpn = FPN(**cfg.fpn)
        self.mask_feat_head = MaskFeatHead(**cfg.mask_feature_head)
        self.bbox_head = SOLOv2Head(**cfg.bbox_head)
        self.mask_feat_head.init_weights()
        self.mode = mode

    def loss(self, outs, mask_feat, gt_labels, gt_masks):
        ins_losses, cate_losses, num_ins = [], [], 0
        for (cate_pred, kernel_pred), s in zip(outs, self.bbox_head.seg_num_grids):
            for b in range(mask_feat.shape[0]):
                cate_target = torch.zeros(self.bbox_head.num_classes, s, s)
                for lbl, m in zip(gt_labels[b], gt_masks[b]):
                    ys, xs = np.nonzero(m)
                    gy = int(ys.mean() / m.shape[0] * s)
                    gx = int(xs.mean() / m.shape[1] * s)
                    cate_target[int(lbl), gy, gx] = 1.0
                    kernel = kernel_pred[b, :, gy, gx].view(-1, self.bbox_head.kernel_out_channels, 1, 1)
                    ins_pred = F.conv2d(mask_feat[b:b + 1], kernel).sigmoid()
                    tgt = torch.from_numpy(m).float()[None, None]
                    tgt = F.interpolate(tgt, size=ins_pred.shape[-2:], mode="nearest")
                    ins_losses.append(dice_loss(ins_pred, tgt))
                    num_ins += 1
                cate_losses.append(sigmoid_focal_loss(cate_pred[b], cate_target).sum())
        loss_ins = torch.cat(ins_losses).mean() * 3.0
        loss_cate = sum(cate_losses) / (num_ins + 1)
        return dict(loss_ins=loss_ins, loss_cate=loss_cate)

    def forward(self, img, img_meta=None, gt_bboxes=None, gt_labels=None, gt_masks=None):
        x = self.fpn(self.backbone(img))
        mask_feat = self.mask_feat_head(x)
        outs = self.bbox_head(x)
        return self.loss(outs, mask_feat, gt_labels, gt_masks)


def make_batch(rng, n, size, num_classes):
    imgs = torch.randn(n, 3, size, size) * 0.1
    labels, masks, bboxes = [], [], []
    for b in range(n):
        lb, ms, bb = [], [], []
        for _ in range(2):
            w = rng.randint(10, 24)
            x0, y0 = rng.randint(0, size - w), rng.randint(0, size - w)
            m = np.zeros((size, size), dtype=np.uint8)
            m[y0:y0 + w, x0:x0 + w] = 1
            c = rng.randint(num_classes)
            imgs[b, c % 3, y0:y0 + w, x0:x0 + w] += 1.0
            lb.append(c); ms.append(m); bb.append([x0, y0, x0 + w, y0 + w])
        labels.append(torch.tensor(lb)); masks.append(np.stack(ms)); bboxes.append(torch.tensor(bb, dtype=torch.float))
    return dict(img=imgs, gt_labels=labels, gt_masks=masks, gt_bboxes=bboxes)


def clip_grads(params):
    params = list(filter(lambda p: p.requires_grad and p.grad is not None, params))
    if len(params) > 0:
        return clip_grad.clip_grad_norm_(params, max_norm=35, norm_type=2)


def set_lr(optimizer, new_lr):
    for param_group in optimizer.param_groups:
        param_group["lr"] = new_lr


def gradinator(x):
    x.requires_grad = False
    return x


def get_warmup_lr(cur_iters, warmup_iters, bash_lr, warmup_ratio, warmup="linear"):
    if warmup == "constant":
        return bash_lr * warmup_ratio
    if warmup == "linear":
        k = (1 - cur_iters / warmup_iters) * (1 - warmup_ratio)
        return bash_lr * (1 - k)
    k = warmup_ratio ** (1 - cur_iters / warmup_iters)
    return bash_lr * k


def train(epoch_iters=1, total_epochs=2, iters_per_epoch=3):
    rng = np.random.RandomState(0)
    model = SOLOV2(cfg, mode="train").train()
    oc = cfg.optimizer
    optimizer = optim.SGD(model.parameters(), lr=oc["lr"], momentum=oc["momentum"], weight_decay=oc["weight_decay"])
    base_nums, base_lr = 0, oc["lr"]
    print("##### begin train ######")
    for iter_nums in range(total_epochs - epoch_iters + 1):
        for j in range(iters_per_epoch):
            if cfg.lr_config["warmup"] is not None and base_nums < cfg.lr_config["warmup_iters"]:
                cur_lr = get_warmup_lr(base_nums, cfg.lr_config["warmup_iters"], oc["lr"], cfg.lr_config["warmup_ratio"], cfg.lr_config["warmup"])
            else:
                cur_lr = base_lr
            set_lr(optimizer, cur_lr)
            last_time = time.time()
            data = make_batch(rng, cfg.imgs_per_gpu, cfg.img_size, cfg.bbox_head["num_classes"])
            imgs = gradinator(data["img"])
            gt_bboxes = [gradinator(b) for b in data["gt_bboxes"]]
            gt_labels = [gradinator(l) for l in data["gt_labels"]]
            loss = model.forward(img=imgs, img_meta=None, gt_bboxes=gt_bboxes, gt_labels=gt_labels, gt_masks=data["gt_masks"])
            losses = loss["loss_ins"] + loss["loss_cate"]
            optimizer.zero_grad()
            losses.backward()
            if torch.isfinite(losses).item():
                clip_grads(model.parameters())
                optimizer.step()
            base_nums += 1
            print(f"epoch [{iter_nums + epoch_iters}/{total_epochs}] [{j}] loss_ins {loss['loss_ins'].item():.4f} "
                  f"loss_cate {loss['loss_cate'].item():.4f} lr {cur_lr:.5f} ({time.time() - last_time:.2f}s)")


if __name__ == "__main__":
    train(epoch_iters=cfg.epoch_iters_start, total_epochs=cfg.total_epoch)
