# expect: no_grad_fn
# source: https://github.com/RangiLyu/nanodet/issues/7
"""NanoDet-style one-stage detector trainer with a Generalized Focal Loss head.

A tiny conv backbone feeds a GFL head (quality focal loss on the class branch,
GIoU + distribution focal loss on the integral box branch).  Targets come
from a center-in-box assigner.  The trainer runs a linear warm-up phase and
then regular epochs, as in nanodet's Trainer.  Images and boxes are seeded
synthetic data; a share of the crops contains no objects after augmentation.
"""
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def multi_apply(func, *args, **kwargs):
    map_results = map(lambda *a: func(*a, **kwargs), *args)
    return tuple(map(list, zip(*map_results)))


def distance2bbox(points, distance):
    x1 = points[:, 0] - distance[:, 0]
    y1 = points[:, 1] - distance[:, 1]
    x2 = points[:, 0] + distance[:, 2]
    y2 = points[:, 1] + distance[:, 3]
    return torch.stack([x1, y1, x2, y2], -1)


def bbox2distance(points, bbox, max_dis):
    left = points[:, 0] - bbox[:, 0]
    top = points[:, 1] - bbox[:, 1]
    right = bbox[:, 2] - points[:, 0]
    bottom = bbox[:, 3] - points[:, 1]
    return torch.stack([left, top, right, bottom], -1).clamp(min=0, max=max_dis - 0.01)


def bbox_overlaps(b1, b2, eps=1e-6):
    lt = torch.max(b1[:, :2], b2[:, :2])
    rb = torch.min(b1[:, 2:], b2[:, 2:])
    wh = (rb - lt).clamp(min=0)
    overlap = wh[:, 0] * wh[:, 1]
    area1 = (b1[:, 2] - b1[:, 0]) * (b1[:, 3] - b1[:, 1])
    area2 = (b2[:, 2] - b2[:, 0]) * (b2[:, 3] - b2[:, 1])
    return overlap / (area1 + area2 - overlap + eps)


def giou_loss(pred, target, weight, eps=1e-7):
    ious = bbox_overlaps(pred, target)
    enclose_lt = torch.min(pred[:, :2], target[:, :2])
    enclose_rb = torch.max(pred[:, 2:], target[:, 2:])
    enclose_wh = (enclose_rb - enclose_lt).clamp(min=0)
    enclose_area = enclose_wh[:, 0] * enclose_wh[:, 1] + eps
    return ((1 - ious + (enclose_area - enclose_area.detach() * ious) / enclose_area) * weight).sum()


def quality_focal_loss(pred, label, score, beta=2.0):
    pred_sigmoid = pred.sigmoid()
    zerolabel = pred_sigmoid.new_zeros(pred.shape)
    loss = F.binary_cross_entropy_with_logits(pred, zerolabel, reduction='none') * pred_sigmoid.pow(beta)
    pos = (label >= 0) & (label < pred.size(1))
    pos_idx = pos.nonzero().squeeze(1)
    if pos_idx.numel() > 0:
        pos_label = label[pos_idx]
        sf = score[pos_idx] - pred_sigmoid[pos_idx, pos_label]
        loss[pos_idx, pos_label] = F.binary_cross_entropy_with_logits(
            pred[pos_idx, pos_label], score[pos_idx], reduction='none') * sf.abs().pow(beta)
    return loss.sum()


def distribution_focal_loss(pred, label):
    dis_left = label.long()
    dis_right = dis_left + 1
    weight_left = dis_right.float() - label
    weight_right = label - dis_left.float()
    return (F.cross_entropy(pred, dis_left, reduction='none') * weight_left
            + F.cross_entropy(pred, dis_right, reduction='none') * weight_right)


class Integral(nn.Module):
    def __init__(self, reg_max=7):
        super().__init__()
        self.reg_max = reg_max
        self.register_buffer('project', torch.linspace(0, self.reg_max, self.reg_max + 1))

    def forward(self, x):
        x = F.softmax(x.reshape(-1, self.reg_max + 1), dim=1)
        return F.linear(x, self.project.type_as(x)).reshape(-1, 4)


class GFLHead(nn.Module):
    def __init__(self, num_classes, loss_cfg, input_channel, feat_channels=16, stride=8, reg_max=7):
        super().__init__()
        self.num_classes = num_classes
        self.loss_cfg = loss_cfg
        self.stride = stride
        self.reg_max = reg_max
        self.cls_conv = nn.Sequential(nn.Conv2d(input_channel, feat_channels, 3, padding=1), nn.ReLU())
        self.reg_conv = nn.Sequential(nn.Conv2d(input_channel, feat_channels, 3, padding=1), nn.ReLU())
        self.gfl_cls = nn.Conv2d(feat_channels, num_classes, 3, padding=1)
        self.gfl_reg = nn.Conv2d(feat_channels, 4 * (reg_max + 1), 3, padding=1)
        self.distribution_project = Integral(reg_max)
        nn.init.constant_(self.gfl_cls.bias, -4.595)

    def forward(self, feat):
        return self.gfl_cls(self.cls_conv(feat)), self.gfl_reg(self.reg_conv(feat))

    def grid_centers(self, h, w):
        ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing='ij')
        return torch.stack([(xs.reshape(-1) + 0.5) * self.stride, (ys.reshape(-1) + 0.5) * self.stride], -1).float()

    def target_assign(self, centers, gt_bboxes, gt_labels):
        labels, bbox_targets = [], []
        for boxes, cls in zip(gt_bboxes, gt_labels):
            label = torch.full((centers.size(0),), self.num_classes, dtype=torch.long)
            target = torch.zeros(centers.size(0), 4)
            for box, c in zip(boxes, cls):
                inside = ((centers[:, 0] > box[0]) & (centers[:, 0] < box[2])
                          & (centers[:, 1] > box[1]) & (centers[:, 1] < box[3]))
                label[inside] = int(c)
                target[inside] = box
            labels.append(label)
            bbox_targets.append(target)
        return torch.cat(labels), torch.cat(bbox_targets)

    def loss_single(self, centers, cls_score, bbox_pred, labels, bbox_targets, num_total_samples):
        cls_score = cls_score.permute(0, 2, 3, 1).reshape(-1, self.num_classes)
        bbox_pred = bbox_pred.permute(0, 2, 3, 1).reshape(-1, 4 * (self.reg_max + 1))
        pos_inds = torch.nonzero((labels >= 0) & (labels < self.num_classes), as_tuple=False).squeeze(1)
        score = cls_score.new_zeros(labels.shape)
        if len(pos_inds) > 0:
            pos_centers = centers[pos_inds] / self.stride
            pos_bbox_pred = bbox_pred[pos_inds]
            pos_targets = bbox_targets[pos_inds] / self.stride
            weight_targets = cls_score.detach().sigmoid().max(dim=1)[0][pos_inds]
            pos_decode = distance2bbox(pos_centers, self.distribution_project(pos_bbox_pred))
            score[pos_inds] = bbox_overlaps(pos_decode.detach(), pos_targets)
            target_corners = bbox2distance(pos_centers, pos_targets, self.reg_max).reshape(-1)
            loss_bbox = giou_loss(pos_decode, pos_targets, weight_targets) * self.loss_cfg.loss_bbox.loss_weight
            loss_dfl = (distribution_focal_loss(pos_bbox_pred.reshape(-1, self.reg_max + 1), target_corners)
                        * weight_targets[:, None].expand(-1, 4).reshape(-1)).sum() / 4.0
            loss_dfl = loss_dfl * self.loss_cfg.loss_dfl.loss_weight
        else:
            loss_bbox = bbox_pred.sum() * 0
            loss_dfl = bbox_pred.sum() * 0
            weight_targets = torch.tensor(0.)
        loss_qfl = quality_focal_loss(cls_score, labels, score) / num_total_samples
        return loss_qfl, loss_bbox, loss_dfl, weight_targets.sum()

    def loss(self, preds, gt_meta):
        cls_score, bbox_pred = preds
        centers = self.grid_centers(cls_score.size(2), cls_score.size(3))
        labels, bbox_targets = self.target_assign(centers, gt_meta['gt_bboxes'], gt_meta['gt_labels'])
        all_centers = centers.repeat(cls_score.size(0), 1)
        num_total_samples = max(float(((labels >= 0) & (labels < self.num_classes)).sum()), 1.0)
        losses_qfl, losses_bbox, losses_dfl, avg_factor = multi_apply(
            self.loss_single, [all_centers], [cls_score], [bbox_pred], [labels], [bbox_targets],
            num_total_samples=num_total_samples)
        avg_factor = sum(avg_factor).item()
        if avg_factor <= 0:
            loss_qfl = torch.tensor(0, dtype=torch.float32)
            loss_bbox = torch.tensor(0, dtype=torch.float32)
            loss_dfl = torch.tensor(0, dtype=torch.float32)
        else:
            loss_qfl = sum(losses_qfl)
            loss_bbox = sum(x / avg_factor for x in losses_bbox)
            loss_dfl = sum(x / avg_factor for x in losses_dfl)
        loss = loss_qfl + loss_bbox + loss_dfl
        return loss, dict(loss_qfl=loss_qfl, loss_bbox=loss_bbox, loss_dfl=loss_dfl)


class OneStageDetector(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
                                      nn.Conv2d(16, 16, 3, stride=2, padding=1), nn.ReLU(),
                                      nn.Conv2d(16, 16, 3, stride=2, padding=1), nn.ReLU())
        self.head = GFLHead(cfg.num_classes, cfg.loss, input_channel=16)

    def forward_train(self, gt_meta):
        preds = self.head(self.backbone(gt_meta['img']))
        loss, loss_states = self.head.loss(preds, gt_meta)
        return preds, loss, loss_states


def synthetic_loader(cfg, seed):
    """Yields batches; augmentation can crop every object out of a batch."""
    rng = np.random.RandomState(seed)
    for step in range(cfg.steps):
        img = torch.from_numpy(rng.rand(cfg.batch_size, 3, 64, 64).astype(np.float32))
        gt_bboxes, gt_labels = [], []
        for _ in range(cfg.batch_size):
            n = 0 if step % 3 == 2 else rng.randint(1, 3)
            xy = rng.uniform(0, 40, size=(n, 2))
            wh = rng.uniform(12, 24, size=(n, 2))
            gt_bboxes.append(torch.from_numpy(np.concatenate([xy, xy + wh], 1).astype(np.float32)))
            gt_labels.append(torch.from_numpy(rng.randint(0, cfg.num_classes, size=n)))
        yield {'img': img, 'gt_bboxes': gt_bboxes, 'gt_labels': gt_labels}


class Trainer:
    def __init__(self, cfg, model):
        self.cfg = cfg
        self.model = model
        self.optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9, weight_decay=1e-4)
        self.lr_scheduler = torch.optim.lr_scheduler.MultiStepLR(self.optimizer, milestones=[2], gamma=0.1)

    def run_step(self, meta, mode='train'):
        output, loss, loss_stats = self.model.forward_train(meta)
        loss = loss.mean()
        if mode == 'train':
            self.optimizer.zero_grad()
            loss.backward()  # raises
            self.optimizer.step()
        return output, loss, loss_stats

    def warm_up(self, data_loader):
        warmup_steps = self.cfg.warmup.steps
        for step, meta in enumerate(data_loader):
            if step >= warmup_steps:
                break
            k = (1 - (step + 1) / warmup_steps) * (1 - self.cfg.warmup.ratio)
            for param_group in self.optimizer.param_groups:
                param_group['lr'] = self.cfg.lr * (1 - k)
            _, loss, loss_stats = self.run_step(meta)
            print('warmup step %d | loss %.4f' % (step, loss.item()))

    def run(self):
        if self.cfg.warmup.steps > 0:
            self.warm_up(synthetic_loader(self.cfg, seed=0))
        for epoch in range(self.cfg.epochs):
            for meta in synthetic_loader(self.cfg, seed=epoch + 1):
                self.run_step(meta)
            self.lr_scheduler.step()
            print('epoch %d done' % epoch)


def main():
    torch.manual_seed(0)
    cfg = SimpleNamespace(
        num_classes=3, batch_size=2, steps=4, epochs=1, lr=0.01,
        warmup=SimpleNamespace(steps=3, ratio=0.1),
        loss=SimpleNamespace(loss_qfl=SimpleNamespace(beta=2.0, loss_weight=1.0),
                             loss_dfl=SimpleNamespace(loss_weight=0.25),
                             loss_bbox=SimpleNamespace(loss_weight=2.0)))
    model = OneStageDetector(cfg)
    Trainer(cfg, model).run()


if __name__ == '__main__':
    main()
