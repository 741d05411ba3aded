# expect: inplace_version
# source: https://github.com/easton-cau/SOTR/issues/19
"""Instance/semantic segmentation with a SOTR-style dynamic mask head.

Layout follows a detectron2-style project: a nested-dict config (cfg.MODEL.SOTR.*),
a small FPN backbone, a transformer-based kernel head that predicts per-grid
categories and dynamic convolution kernels, a MaskHead that merges all FPN
levels into a unified mask feature, dice + focal-style losses, and a trainer with
warmup-then-step LR schedule, hooks and a periodic evaluation.  Synthetic images
and masks on CPU.
"""
import math
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_cfg():
    sotr = SimpleNamespace(NUM_CLASSES=3, NUM_GRIDS=[6, 4], NUM_MASKS=16, MASK_IN_CHANNELS=16,
                           MASK_CHANNELS=16, MASK_IN_FEATURES=["p2", "p3", "p4"], NORM="GN",
                           NUM_GROUPS=4, PRIOR_PROB=0.01, DICE_WEIGHT=3.0, FOCAL_WEIGHT=1.0)
    model = SimpleNamespace(SOTR=sotr, FPN_OUT_CHANNELS=16, MASK_ON=True)
    solver = SimpleNamespace(BASE_LR=0.01, MOMENTUM=0.9, WEIGHT_DECAY=1e-4, WARMUP_ITERS=3,
                             STEPS=(8,), GAMMA=0.1, MAX_ITER=10, EVAL_PERIOD=5)
    return SimpleNamespace(MODEL=model, SOLVER=solver, INPUT_SIZE=32, BATCH=2, SEED=0)


class TinyFPN(nn.Module):
    def __init__(self, out_channels):
        super().__init__()
        self.c2 = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.ReLU())
        self.c3 = nn.Sequential(nn.Conv2d(16, 24, 3, 2, 1), nn.ReLU())
        self.c4 = nn.Sequential(nn.Conv2d(24, 32, 3, 2, 1), nn.ReLU())
        self.lat = nn.ModuleList([nn.Conv2d(c, out_channels, 1) for c in (16, 24, 32)])

    def forward(self, x):
        c2 = self.c2(x)
        c3 = self.c3(c2)
        c4 = self.c4(c3)
        p4 = self.lat[2](c4)
        p3 = self.lat[1](c3) + F.interpolate(p4, scale_factor=2, mode="nearest")
        p2 = self.lat[0](c2) + F.interpolate(p3, scale_factor=2, mode="nearest")
        return {"p2": p2, "p3": p3, "p4": p4}


class SOTRHead(nn.Module):
    """Transformer over grid-resized features predicting categories and dynamic kernels."""

    def __init__(self, cfg):
        super().__init__()
        c = cfg.MODEL.FPN_OUT_CHANNELS
        self.num_grids = cfg.MODEL.SOTR.NUM_GRIDS
        self.transformer = nn.TransformerEncoderLayer(c, 4, 32, dropout=0.0, batch_first=True)
        self.cate_pred = nn.Linear(c, cfg.MODEL.SOTR.NUM_CLASSES)
        self.kernel_pred = nn.Linear(c, cfg.MODEL.SOTR.NUM_MASKS)
        bias_value = -math.log((1 - cfg.MODEL.SOTR.PRIOR_PROB) / cfg.MODEL.SOTR.PRIOR_PROB)
        torch.nn.init.constant_(self.cate_pred.bias, bias_value)

    def forward(self, features):
        cate_pred, kernel_pred = [], []
        for feature, grid in zip(features, self.num_grids):
            feat = F.interpolate(feature, size=grid, mode="bilinear", align_corners=False)
            tokens = self.transformer(feat.flatten(2).transpose(1, 2))
            cate_pred.append(self.cate_pred(tokens))
            kernel_pred.append(self.kernel_pred(tokens))
        return cate_pred, kernel_pred


class MaskHead(nn.Module):
    """SOTR Mask Head: merges all levels into one mask feature map."""

    def __init__(self, cfg, num_levels):
        super().__init__()
        sotr = cfg.MODEL.SOTR
        self.num_levels = num_levels
        norm = None if sotr.NORM == "none" else sotr.NORM
        self.convs_all_levels = nn.ModuleList()
        for i in range(self.num_levels):
            tower = [nn.Conv2d(sotr.MASK_IN_CHANNELS, sotr.MASK_CHANNELS, 3, 1, 1, bias=norm is None)]
            if norm == "GN":
                tower.append(nn.GroupNorm(sotr.NUM_GROUPS, sotr.MASK_CHANNELS))
            tower.append(nn.ReLU(inplace=False))
            level = nn.Sequential(*tower)
            for _ in range(i):
                level.append(nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False))
            self.convs_all_levels.append(level)
        self.conv_pred = nn.Sequential(nn.Conv2d(sotr.MASK_CHANNELS, sotr.NUM_MASKS, 1, bias=norm is None),
                                       nn.GroupNorm(sotr.NUM_GROUPS, sotr.NUM_MASKS), nn.ReLU(inplace=True))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                torch.nn.init.normal_(m.weight, std=0.01)

    def forward(self, features):
        assert len(features) == self.num_levels
        feature_add_all_level = self.convs_all_levels[0](features[0])
        for i in range(1, self.num_levels):
            mask_feat = features[i]
            feature_add_all_level += self.convs_all_levels[i](mask_feat)
        return self.conv_pred(feature_add_all_level)


def dice_loss(inputs, targets, eps=1e-5):
    inputs = inputs.sigmoid().flatten(1)
    targets = targets.flatten(1)
    a = (inputs * targets).sum(1)
    b = (inputs * inputs).sum(1) + eps
    c = (targets * targets).sum(1) + eps
    return (1 - 2 * a / (b + c)).mean()


class SOTR(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.in_features = cfg.MODEL.SOTR.MASK_IN_FEATURES
        self.backbone = TinyFPN(cfg.MODEL.FPN_OUT_CHANNELS)
        self.head = SOTRHead(cfg)
        self.mask_head = MaskHead(cfg, len(self.in_features))

    def forward(self, images, targets=None):
        feats = self.backbone(images)
        features = [feats[f] for f in self.in_features]
        cate_pred, kernel_pred = self.head(features[:2])
        mask_feat = self.mask_head(features)
        # dynamic convolution: one kernel per grid cell of the finest grid
        kernels = kernel_pred[0]                                   # B x S^2 x E
        masks = torch.einsum("bse,behw->bshw", kernels, mask_feat)  # B x S^2 x H x W
        if targets is None:
            return cate_pred, masks
        return self.losses(cate_pred, masks, targets)

    def losses(self, cate_pred, masks, targets):
        sotr = self.cfg.MODEL.SOTR
        gt_masks = F.interpolate(targets["masks"], size=masks.shape[-2:], mode="nearest")
        pos = targets["pos_index"]
        loss_ins = dice_loss(masks[:, pos], gt_masks) * sotr.DICE_WEIGHT
        cate = torch.cat([c.flatten(0, 1) for c in cate_pred])
        labels = torch.cat([l.flatten() for l in targets["cate_labels"]])
        onehot = F.one_hot(labels, sotr.NUM_CLASSES).float()
        loss_cate = F.binary_cross_entropy_with_logits(cate, onehot) * sotr.FOCAL_WEIGHT
        return {"loss_ins": loss_ins, "loss_cate": loss_cate}


class PeriodicWriter:
    def after_step(self, trainer):
        if trainer.iter % 2 == 0:
            print("iter %d lr %.5f %s" % (trainer.iter, trainer.scheduler.get_last_lr()[0],
                                          " ".join("%s=%.4f" % kv for kv in trainer.last_losses.items())))


def build_lr_scheduler(cfg, optimizer):
    def f(it):
        warm = min(1.0, (it + 1) / cfg.SOLVER.WARMUP_ITERS)
        return warm * (cfg.SOLVER.GAMMA ** sum(it >= s for s in cfg.SOLVER.STEPS))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, f)


class SimpleTrainer:
    def __init__(self, cfg):
        self.cfg = cfg
        self.model = SOTR(cfg)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=cfg.SOLVER.BASE_LR,
                                         momentum=cfg.SOLVER.MOMENTUM, weight_decay=cfg.SOLVER.WEIGHT_DECAY)
        self.scheduler = build_lr_scheduler(cfg, self.optimizer)
        self.hooks = [PeriodicWriter()]
        self.gen = torch.Generator().manual_seed(cfg.SEED)
        self.iter, self.last_losses = 0, {}

    def next_batch(self):
        s, b = self.cfg.INPUT_SIZE, self.cfg.BATCH
        grids = self.cfg.MODEL.SOTR.NUM_GRIDS
        images = torch.rand(b, 3, s, s, generator=self.gen)
        masks = (torch.rand(b, 2, s, s, generator=self.gen) > 0.7).float()
        cate = [torch.randint(0, self.cfg.MODEL.SOTR.NUM_CLASSES, (b, g * g), generator=self.gen) for g in grids]
        return images, {"masks": masks, "pos_index": torch.tensor([3, 10]), "cate_labels": cate}

    def run_step(self):
        images, targets = self.next_batch()
        loss_dict = self.model(images, targets)
        losses = sum(loss_dict.values())
        self.optimizer.zero_grad()
        losses.backward()  # raises
        self.optimizer.step()
        self.scheduler.step()
        self.last_losses = {k: v.item() for k, v in loss_dict.items()}

    @torch.no_grad()
    def test(self):
        self.model.eval()
        images, _ = self.next_batch()
        _, masks = self.model(images)
        self.model.train()
        return (masks.sigmoid() > 0.5).float().mean().item()

    def train(self):
        self.model.train()
        for self.iter in range(self.cfg.SOLVER.MAX_ITER):
            self.run_step()
            for h in self.hooks:
                h.after_step(self)
            if (self.iter + 1) % self.cfg.SOLVER.EVAL_PERIOD == 0:
                print("eval mask coverage %.4f" % self.test())


def main():
    cfg = get_cfg()
    torch.manual_seed(cfg.SEED)
    SimpleTrainer(cfg).train()


if __name__ == "__main__":
    main()
