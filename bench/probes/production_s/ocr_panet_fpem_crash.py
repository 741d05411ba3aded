# expect: inplace_version
# source: https://github.com/open-mmlab/mmocr/pull/884
"""PANet scene-text detector in the style of MMOCR.

A small ResNet-like backbone feeds the FPEM_FFM neck (feature pyramid
enhancement modules, repeated `fpem_repeat` times, followed by feature fusion),
and a PAN head predicts text / kernel maps plus pixel embeddings.  Modules are
built from an mmcv-style nested config through registries; an EpochBasedRunner
with hooks (optimizer, lr schedule, logging) drives training on synthetic
document crops with rectangular text lines.
"""
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class Registry:
    def __init__(self, name):
        self.name, self._modules = name, {}

    def register_module(self):
        def _register(cls):
            self._modules[cls.__name__] = cls
            return cls
        return _register

    def build(self, cfg):
        cfg = dict(cfg)
        return self._modules[cfg.pop("type")](**cfg)


BACKBONES, NECKS, HEADS, LOSSES = (Registry(n) for n in ("backbone", "neck", "head", "loss"))


def conv_bn_relu(cin, cout, stride=1):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


@BACKBONES.register_module()
class TinyResNet(nn.Module):
    def __init__(self, in_channels=3, stage_channels=(16, 24, 32, 48)):
        super().__init__()
        self.stem = conv_bn_relu(in_channels, stage_channels[0], stride=2)
        chans = [stage_channels[0]] + list(stage_channels)
        self.stages = nn.ModuleList(
            [nn.Sequential(conv_bn_relu(chans[i], chans[i + 1], stride=1 if i == 0 else 2),
                           conv_bn_relu(chans[i + 1], chans[i + 1])) for i in range(4)])

    def forward(self, x):
        x, outs = self.stem(x), []
        for stage in self.stages:
            x = stage(x)
            outs.append(x)
        return tuple(outs)


class SeparableConv2d(nn.Module):
    def __init__(self, in_channels, out_channels, stride=1):
        super().__init__()
        self.depthwise_conv = nn.Conv2d(in_channels, in_channels, 3, stride, 1, groups=in_channels)
        self.pointwise_conv = nn.Conv2d(in_channels, out_channels, kernel_size=1)
        self.bn = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.bn(self.pointwise_conv(self.depthwise_conv(x))))


class FPEM(nn.Module):
    """FPN-like feature fusion module in PANet."""

    def __init__(self, in_channels=128):
        super().__init__()
        self.up_add1 = SeparableConv2d(in_channels, in_channels, 1)
        self.up_add2 = SeparableConv2d(in_channels, in_channels, 1)
        self.up_add3 = SeparableConv2d(in_channels, in_channels, 1)
        self.down_add1 = SeparableConv2d(in_channels, in_channels, 2)
        self.down_add2 = SeparableConv2d(in_channels, in_channels, 2)
        self.down_add3 = SeparableConv2d(in_channels, in_channels, 2)

    def forward(self, c2, c3, c4, c5):
        c4 = self.up_add1(self._upsample_add(c5, c4))
        c3 = self.up_add2(self._upsample_add(c4, c3))
        c2 = self.up_add3(self._upsample_add(c3, c2))
        c3 = self.down_add1(self._upsample_add(c3, c2))
        c4 = self.down_add2(self._upsample_add(c4, c3))
        c5 = self.down_add3(self._upsample_add(c5, c4))
        return c2, c3, c4, c5

    def _upsample_add(self, x, y):
        return F.interpolate(x, size=y.size()[2:]) + y


@NECKS.register_module()
class FPEM_FFM(nn.Module):
    def __init__(self, in_channels, conv_out=128, fpem_repeat=2, align_corners=False):
        super().__init__()
        self.reduce_convs = nn.ModuleList(
            [nn.Sequential(nn.Conv2d(c, conv_out, kernel_size=1), nn.BatchNorm2d(conv_out), nn.ReLU())
             for c in in_channels])
        self.align_corners = align_corners
        self.fpems = nn.ModuleList([FPEM(conv_out) for _ in range(fpem_repeat)])

    def forward(self, x):
        c2, c3, c4, c5 = [conv(f) for conv, f in zip(self.reduce_convs, x)]
        for i, fpem in enumerate(self.fpems):
            c2, c3, c4, c5 = fpem(c2, c3, c4, c5)
            if i == 0:
                c2_ffm, c3_ffm, c4_ffm, c5_ffm = c2, c3, c4, c5
            else:
                c2_ffm += c2
                c3_ffm += c3
                c4_ffm += c4
                c5_ffm += c5
        size = c2_ffm.size()[-2:]
        c5 = F.interpolate(c5_ffm, size, mode="bilinear", align_corners=self.align_corners)
        c4 = F.interpolate(c4_ffm, size, mode="bilinear", align_corners=self.align_corners)
        c3 = F.interpolate(c3_ffm, size, mode="bilinear", align_corners=self.align_corners)
        return torch.cat([c2_ffm, c3, c4, c5], dim=1)


@LOSSES.register_module()
class PANLoss(nn.Module):
    def __init__(self, alpha=0.5, beta=0.25, delta_aggregation=0.5, ohem_ratio=3):
        super().__init__()
        self.alpha, self.beta, self.delta_aggregation, self.ohem_ratio = alpha, beta, delta_aggregation, ohem_ratio

    @staticmethod
    def dice_loss(pred, target, mask):
        pred = torch.sigmoid(pred).flatten(1) * mask.flatten(1)
        target = target.flatten(1) * mask.flatten(1)
        a = (pred * target).sum(1)
        b = (pred * pred).sum(1) + 1e-3
        c = (target * target).sum(1) + 1e-3
        return (1 - 2 * a / (b + c)).mean()

    def aggregation_loss(self, emb, text, kernel):
        losses = []
        for e, t, k in zip(emb, text, kernel):
            if k.sum() < 1:
                continue
            g_kernel = (e * k).flatten(1).sum(1) / k.sum()
            dist = (e - g_kernel[:, None, None]).norm(dim=0) - self.delta_aggregation
            losses.append((F.relu(dist).pow(2) * t).sum() / t.sum().clamp(min=1))
        return torch.stack(losses).mean() if losses else emb.sum() * 0

    def forward(self, preds, gt_text, gt_kernel, gt_mask):
        loss_text = self.dice_loss(preds[:, 0], gt_text, gt_mask)
        loss_kernel = self.dice_loss(preds[:, 1], gt_kernel, gt_mask * gt_text)
        loss_aggr = self.aggregation_loss(preds[:, 2:], gt_text, gt_kernel)
        return dict(loss_text=loss_text, loss_kernel=self.alpha * loss_kernel, loss_aggr=self.beta * loss_aggr)


@HEADS.register_module()
class PANHead(nn.Module):
    def __init__(self, in_channels, out_channels=6, loss=None):
        super().__init__()
        self.out_conv = nn.Conv2d(in_channels, out_channels, kernel_size=1)
        self.loss_module = LOSSES.build(loss)

    def forward(self, x):
        return self.out_conv(x)


class PANet(nn.Module):
    def __init__(self, backbone, neck, bbox_head):
        super().__init__()
        self.backbone, self.neck, self.bbox_head = BACKBONES.build(backbone), NECKS.build(neck), HEADS.build(bbox_head)

    def forward_train(self, img, gt_text, gt_kernel, gt_mask):
        preds = self.bbox_head(self.neck(self.backbone(img)))
        preds = F.interpolate(preds, size=img.shape[-2:], mode="bilinear", align_corners=False)
        return self.bbox_head.loss_module(preds, gt_text, gt_kernel, gt_mask)

    def train_step(self, data, optimizer):
        losses = self.forward_train(**data)
        loss = sum(losses.values())
        log_vars = {k: v.item() for k, v in losses.items()}
        return dict(loss=loss, log_vars=log_vars, num_samples=data["img"].size(0))


class OptimizerHook:
    def __init__(self, grad_clip=None):
        self.grad_clip = grad_clip

    def after_train_iter(self, runner):
        runner.optimizer.zero_grad()
        runner.outputs["loss"].backward()  # raises
        if self.grad_clip is not None:
            nn.utils.clip_grad_norm_(runner.model.parameters(), **self.grad_clip)
        runner.optimizer.step()


class PolyLrUpdaterHook:
    def __init__(self, power=0.9, min_lr=1e-6):
        self.power, self.min_lr = power, min_lr

    def after_train_iter(self, runner):
        progress = runner.iter / runner.max_iters
        for group, base in zip(runner.optimizer.param_groups, runner.base_lrs):
            group["lr"] = (base - self.min_lr) * (1 - progress) ** self.power + self.min_lr


class TextLoggerHook:
    def __init__(self, interval=2):
        self.interval = interval

    def after_train_iter(self, runner):
        if runner.iter % self.interval == 0:
            items = ", ".join("%s: %.4f" % kv for kv in runner.outputs["log_vars"].items())
            print("Epoch [%d][%d]\tlr: %.5f, %s" % (runner.epoch + 1, runner.iter,
                                                   runner.optimizer.param_groups[0]["lr"], items))


class EpochBasedRunner:
    def __init__(self, model, optimizer, max_epochs):
        self.model, self.optimizer, self.max_epochs = model, optimizer, max_epochs
        self.base_lrs = [g["lr"] for g in optimizer.param_groups]
        self.hooks, self.iter, self.epoch = [], 0, 0

    def register_hook(self, hook):
        self.hooks.append(hook)

    def run(self, data_loader):
        self.max_iters = self.max_epochs * len(data_loader)
        for self.epoch in range(self.max_epochs):
            self.model.train()
            for data in data_loader:
                self.outputs = self.model.train_step(data, self.optimizer)
                self.iter += 1
                for hook in self.hooks:
                    hook.after_train_iter(self)


def synthetic_text_batches(n_batches=4, batch_size=2, size=64, seed=0):
    rng = np.random.RandomState(seed)
    batches = []
    for _ in range(n_batches):
        img = torch.from_numpy(rng.rand(batch_size, 3, size, size).astype(np.float32))
        text = torch.zeros(batch_size, size, size)
        for b in range(batch_size):
            for _ in range(2):
                y0, x0 = rng.randint(4, size - 16), rng.randint(4, size - 32)
                text[b, y0:y0 + 8, x0:x0 + 24] = 1.0
        kernel = -F.max_pool2d(-text[:, None], 3, 1, 1)[:, 0]
        batches.append(dict(img=img, gt_text=text, gt_kernel=kernel, gt_mask=torch.ones_like(text)))
    return batches


cfg = dict(
    model=dict(
        backbone=dict(type="TinyResNet", stage_channels=(16, 24, 32, 48)),
        neck=dict(type="FPEM_FFM", in_channels=[16, 24, 32, 48], conv_out=16, fpem_repeat=2),
        bbox_head=dict(type="PANHead", in_channels=64, out_channels=6,
                       loss=dict(type="PANLoss", alpha=0.5, beta=0.25))),
    optimizer=dict(lr=1e-3, weight_decay=0.0),
    optimizer_config=dict(grad_clip=dict(max_norm=35, norm_type=2)),
    total_epochs=2,
)


def main():
    torch.manual_seed(0)
    model = PANet(**cfg["model"])
    optimizer = torch.optim.Adam(model.parameters(), **cfg["optimizer"])
    runner = EpochBasedRunner(model, optimizer, max_epochs=cfg["total_epochs"])
    runner.register_hook(OptimizerHook(**cfg["optimizer_config"]))
    runner.register_hook(PolyLrUpdaterHook(power=0.9))
    runner.register_hook(TextLoggerHook(interval=2))
    runner.run(synthetic_text_batches())
    print("done, %d iters, lr %.2e" % (runner.iter, math.fsum(g["lr"] for g in optimizer.param_groups)))


if __name__ == "__main__":
    main()
