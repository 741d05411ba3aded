# expect: clean
# source: https://github.com/open-mmlab/mmdetection/issues/3667
"""Single-stage detector trained with an mmcv-style epoch-based runner.

Mirrors the mmdetection 2.x layout: a nested-dict config, a registry-like
builder, a SingleStageDetector (backbone, optional neck, SSD-style bbox head
with anchor targets), `_parse_losses`, `train_step`/`val_step`, and an
EpochBasedRunner driving OptimizerHook, LrUpdaterHook and TextLoggerHook.
Synthetic images and boxes on CPU.
"""
import copy
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


cfg = dict(
    model=dict(
        type='SingleStageDetector',
        backbone=dict(type='TinyVGG', in_channels=3, widths=(16, 32)),
        neck=None,
        bbox_head=dict(type='SSDHead', in_channels=32, num_classes=3, num_anchors=2),
    ),
    train_cfg=dict(pos_iou_thr=0.5, neg_pos_ratio=3),
    optimizer=dict(type='SGD', lr=0.01, momentum=0.9, weight_decay=5e-4),
    optimizer_config=dict(grad_clip=dict(max_norm=35, norm_type=2)),
    lr_config=dict(policy='step', warmup_iters=4, warmup_ratio=0.1, step=[2]),
    total_epochs=2,
    log_config=dict(interval=2),
)


class TinyVGG(nn.Module):
    def __init__(self, in_channels, widths):
        super().__init__()
        layers = []
        for w in widths:
            layers += [nn.Conv2d(in_channels, w, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2)]
            in_channels = w
        self.features = nn.Sequential(*layers)

    def forward(self, x):
        return (self.features(x),)


class SSDHead(nn.Module):
    def __init__(self, in_channels, num_classes, num_anchors):
        super().__init__()
        self.num_classes = num_classes
        self.num_anchors = num_anchors
        self.cls_convs = nn.Conv2d(in_channels, num_anchors * (num_classes + 1), 3, padding=1)
        self.reg_convs = nn.Conv2d(in_channels, num_anchors * 4, 3, padding=1)
        self._anchor_cache = {}

    def anchors(self, featmap_size, stride):
        key = (featmap_size, stride)
        if key not in self._anchor_cache:
            h, w = featmap_size
            ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing='ij')
            cx, cy = (xs.flatten() + 0.5) * stride, (ys.flatten() + 0.5) * stride
            per_scale = []
            for s in (1.5, 3.0)[:self.num_anchors]:
                half = s * stride / 2
                per_scale.append(torch.stack([cx - half, cy - half, cx + half, cy + half], -1))
            self._anchor_cache[key] = torch.stack(per_scale, 1).reshape(-1, 4).float()
        return self._anchor_cache[key]

    def forward(self, feats):
        x = feats[-1]
        return self.cls_convs(x), self.reg_convs(x)

    def get_targets(self, anchors, gt_bboxes, gt_labels, train_cfg):
        labels, bbox_targets = [], []
        for boxes, lbls in zip(gt_bboxes, gt_labels):
            ious = box_iou(anchors, boxes)
            max_iou, argmax = ious.max(1)
            lab = torch.full((anchors.size(0),), self.num_classes, dtype=torch.long)
            pos = max_iou >= train_cfg['pos_iou_thr']
            lab[pos] = lbls[argmax[pos]]
            labels.append(lab)
            bbox_targets.append(encode(anchors, boxes[argmax]))
        return torch.stack(labels), torch.stack(bbox_targets)

    def loss(self, cls_score, bbox_pred, gt_bboxes, gt_labels, img_shape, train_cfg):
        n, _, h, w = cls_score.shape
        stride = img_shape[0] // h
        anchors = self.anchors((h, w), stride)
        cls_score = cls_score.permute(0, 2, 3, 1).reshape(n, -1, self.num_classes + 1)
        bbox_pred = bbox_pred.permute(0, 2, 3, 1).reshape(n, -1, 4)
        labels, bbox_targets = self.get_targets(anchors, gt_bboxes, gt_labels, train_cfg)
        pos = labels < self.num_classes
        loss_cls_all = F.cross_entropy(cls_score.reshape(-1, self.num_classes + 1), labels.reshape(-1),
                                       reduction='none').view(n, -1)
        num_pos = max(int(pos.sum()), 1)
        neg_loss = loss_cls_all.masked_fill(pos, 0.)
        topk = min(train_cfg['neg_pos_ratio'] * num_pos, neg_loss.size(1))
        loss_cls = (loss_cls_all[pos].sum() + neg_loss.topk(topk, dim=1)[0].sum()) / num_pos
        loss_bbox = F.smooth_l1_loss(bbox_pred[pos], bbox_targets[pos], reduction='sum') / num_pos
        return dict(loss_cls=loss_cls, loss_bbox=loss_bbox)


def box_iou(a, b):
    lt = torch.max(a[:, None, :2], b[None, :, :2])
    rb = torch.min(a[:, None, 2:], b[None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    area_a = (a[:, 2:] - a[:, :2]).prod(-1)
    area_b = (b[:, 2:] - b[:, :2]).prod(-1)
    return inter / (area_a[:, None] + area_b[None] - inter)


def encode(anchors, gt):
    wa, ha = anchors[:, 2] - anchors[:, 0], anchors[:, 3] - anchors[:, 1]
    wg, hg = gt[:, 2] - gt[:, 0], gt[:, 3] - gt[:, 1]
    dx = ((gt[:, 0] + gt[:, 2]) - (anchors[:, 0] + anchors[:, 2])) / 2 / wa
    dy = ((gt[:, 1] + gt[:, 3]) - (anchors[:, 1] + anchors[:, 3])) / 2 / ha
    return torch.stack([dx, dy, torch.log(wg / wa), torch.log(hg / ha)], -1)


REGISTRY = {'TinyVGG': TinyVGG, 'SSDHead': SSDHead}


def build(cfg_node):
    if cfg_node is None:
        return None
    args = copy.deepcopy(cfg_node)
    return REGISTRY[args.pop('type')](**args)


class SingleStageDetector(nn.Module):
    def __init__(self, backbone, neck=None, bbox_head=None, train_cfg=None):
        super().__init__()
        self.backbone = build(backbone)
        self.neck = build(neck)
        self.bbox_head = build(bbox_head)
        self.train_cfg = train_cfg

        for v in self.backbone.parameters():
            v.requires_grad = False

    @property
    def with_neck(self):
        return self.neck is not None

    def extract_feat(self, img):
        x = self.backbone(img)
        if self.with_neck:
            x = self.neck(x)
        return x

    def forward_train(self, img, gt_bboxes, gt_labels):
        cls_score, bbox_pred = self.bbox_head(self.extract_feat(img))
        return self.bbox_head.loss(cls_score, bbox_pred, gt_bboxes, gt_labels, img.shape[-2:], self.train_cfg)

    @staticmethod
    def _parse_losses(losses):
        log_vars = OrderedDict((k, v.mean()) for k, v in losses.items())
        loss = sum(v for k, v in log_vars.items() if 'loss' in k)
        log_vars['loss'] = loss
        return loss, OrderedDict((k, v.item()) for k, v in log_vars.items())

    def train_step(self, data, optimizer):
        losses = self.forward_train(**data)
        loss, log_vars = self._parse_losses(losses)
        return dict(loss=loss, log_vars=log_vars, num_samples=len(data['img']))

    def val_step(self, data, optimizer=None):
        with torch.no_grad():
            return self.train_step(data, optimizer)


class Hook:
    def before_train_epoch(self, runner): pass
    def before_train_iter(self, runner): pass
    def after_train_iter(self, runner): pass
    def after_train_epoch(self, runner): pass


class OptimizerHook(Hook):
    def __init__(self, grad_clip=None):
        self.grad_clip = grad_clip

    def clip_grads(self, params):
        params = [p for p in params if p.requires_grad and p.grad is not None]
        if params:
            return nn.utils.clip_grad_norm_(params, **self.grad_clip)

    def after_train_iter(self, runner):
        runner.optimizer.zero_grad()
        runner.outputs['loss'].backward()
        if self.grad_clip is not None:
            self.clip_grads(runner.model.parameters())
        runner.optimizer.step()


class StepLrUpdaterHook(Hook):
    def __init__(self, step, warmup_iters=0, warmup_ratio=0.1, gamma=0.1, **kwargs):
        self.step, self.warmup_iters, self.warmup_ratio, self.gamma = step, warmup_iters, warmup_ratio, gamma

    def before_train_iter(self, runner):
        base = runner.base_lr * self.gamma ** sum(runner.epoch >= s for s in self.step)
        if runner.iter < self.warmup_iters:
            k = (1 - runner.iter / self.warmup_iters) * (1 - self.warmup_ratio)
            base = base * (1 - k)
        for group in runner.optimizer.param_groups:
            group['lr'] = base


class TextLoggerHook(Hook):
    def __init__(self, interval):
        self.interval = interval

    def after_train_iter(self, runner):
        if (runner.inner_iter + 1) % self.interval == 0:
            items = ', '.join(f'{k}: {v:.4f}' for k, v in runner.outputs['log_vars'].items())
            print(f'Epoch [{runner.epoch + 1}][{runner.inner_iter + 1}] {items}')


class EpochBasedRunner:
    def __init__(self, model, optimizer, max_epochs):
        self.model, self.optimizer, self.max_epochs = model, optimizer, max_epochs
        self.base_lr = optimizer.param_groups[0]['lr']
        self._hooks = []
        self.epoch = self.iter = self.inner_iter = 0
        self.outputs = None

    def register_hook(self, hook):
        self._hooks.append(hook)

    def call_hook(self, fn_name):
        for hook in self._hooks:
            getattr(hook, fn_name)(self)

    def train(self, data_loader):
        self.model.train()
        self.call_hook('before_train_epoch')
        for i, data_batch in enumerate(data_loader):
            self.inner_iter = i
            self.call_hook('before_train_iter')
            self.outputs = self.model.train_step(data_batch, self.optimizer)
            self.call_hook('after_train_iter')
            self.iter += 1
        self.call_hook('after_train_epoch')
        self.epoch += 1

    def run(self, data_loader):
        while self.epoch < self.max_epochs:
            self.train(data_loader)


def synthetic_loader(num_batches=4, batch_size=2, size=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(num_batches):
        img = torch.randn(batch_size, 3, size, size, generator=g)
        gt_bboxes, gt_labels = [], []
        for _ in range(batch_size):
            xy = torch.rand(2, 2, generator=g) * (size / 2)
            wh = 6 + torch.rand(2, 2, generator=g) * (size / 3)
            gt_bboxes.append(torch.cat([xy, xy + wh], 1))
            gt_labels.append(torch.randint(0, 3, (2,), generator=g))
        batches.append(dict(img=img, gt_bboxes=gt_bboxes, gt_labels=gt_labels))
    return batches


def train_detector(model, dataset, cfg):
    opt_cfg = copy.deepcopy(cfg['optimizer'])
    optimizer = getattr(torch.optim, opt_cfg.pop('type'))(model.parameters(), **opt_cfg)
    runner = EpochBasedRunner(model, optimizer, cfg['total_epochs'])
    lr_cfg = copy.deepcopy(cfg['lr_config'])
    lr_cfg.pop('policy')
    runner.register_hook(StepLrUpdaterHook(**lr_cfg))
    runner.register_hook(OptimizerHook(**cfg['optimizer_config']))
    runner.register_hook(TextLoggerHook(**cfg['log_config']))
    runner.run(dataset)


def main():
    torch.manual_seed(0)
    np.random.seed(0)
    model_cfg = copy.deepcopy(cfg['model'])
    model_cfg.pop('type')
    model = SingleStageDetector(**model_cfg, train_cfg=cfg['train_cfg'])
    train_detector(model, synthetic_loader(), cfg)


if __name__ == '__main__':
    main()
