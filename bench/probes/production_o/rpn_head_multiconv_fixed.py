# expect: clean
# source: https://github.com/open-mmlab/mmdetection/issues/7933
"""Mask R-CNN style detector trained with the 2-conv RPN head of the
simple-copy-paste config (``rpn_head=dict(num_convs=2)``).

Layout follows mmdet 2.x: ConvModule (mmcv.cnn), FPN neck, AnchorHead /
RPNHead (dense_heads/rpn_head.py), a TwoStageDetector-like wrapper with
``forward_train`` and ``_parse_losses``, and a small epoch runner.
"""
import math
from collections import OrderedDict

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

model_cfg = dict(
    backbone=dict(in_channels=3, widths=(8, 16, 32)),
    neck=dict(out_channels=16, num_outs=3),
    rpn_head=dict(
        in_channels=16,
        feat_channels=16,
        num_convs=2,
        anchor_generator=dict(scales=[4], ratios=[0.5, 1.0, 2.0], strides=[4, 8, 16]),
        loss_cls=dict(loss_weight=1.0),
        loss_bbox=dict(beta=1.0 / 9.0, loss_weight=1.0)),
    train_cfg=dict(rpn=dict(pos_iou_thr=0.5, neg_iou_thr=0.3, num=64)),
)
optimizer_cfg = dict(lr=0.02, momentum=0.9, weight_decay=1e-4)
lr_config = dict(warmup_iters=4, warmup_ratio=0.001)


# ---------------------------------------------------------------- mmcv.cnn
class ConvModule(nn.Module):
    """conv / norm / activation block (mmcv.cnn.ConvModule)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 with_norm=False, inplace=True):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding,
                              bias=not with_norm)
        self.norm = nn.BatchNorm2d(out_channels) if with_norm else None
        self.activate = nn.ReLU(inplace=inplace)

    def forward(self, x):
        x = self.conv(x)
        if self.norm is not None:
            x = self.norm(x)
        return self.activate(x)


# ---------------------------------------------------------------- backbone / neck
class TinyResNet(nn.Module):
    def __init__(self, in_channels, widths):
        super().__init__()
        self.stem = ConvModule(in_channels, widths[0], 3, stride=2, padding=1, with_norm=True)
        self.stages = nn.ModuleList()
        c = widths[0]
        for i, w in enumerate(widths):
            stride = 1 if i == 0 else 2
            self.stages.append(ConvModule(c, w, 3, stride=stride, padding=1, with_norm=True))
            c = w

    def forward(self, x):
        x = self.stem(x)
        outs = []
        for stage in self.stages:
            x = stage(x)
            outs.append(x)
        return tuple(outs)


class FPN(nn.Module):
    def __init__(self, in_channels, out_channels, num_outs):
        super().__init__()
        self.lateral_convs = nn.ModuleList([nn.Conv2d(c, out_channels, 1) for c in in_channels])
        self.fpn_convs = nn.ModuleList([nn.Conv2d(out_channels, out_channels, 3, padding=1)
                                        for _ in in_channels])
        self.num_outs = num_outs

    def forward(self, inputs):
        laterals = [conv(inputs[i]) for i, conv in enumerate(self.lateral_convs)]
        for i in range(len(laterals) - 1, 0, -1):
            prev_shape = laterals[i - 1].shape[2:]
            laterals[i - 1] = laterals[i - 1] + F.interpolate(laterals[i], size=prev_shape,
                                                              mode='nearest')
        return tuple(self.fpn_convs[i](laterals[i]) for i in range(self.num_outs))


# ---------------------------------------------------------------- anchors / targets
def grid_anchors(featmap_sizes, scales, ratios, strides):
    all_anchors = []
    for (h, w), stride in zip(featmap_sizes, strides):
        base = []
        for r in ratios:
            for s in scales:
                size = s * stride
                bw, bh = size / math.sqrt(r), size * math.sqrt(r)
                base.append([-bw / 2, -bh / 2, bw / 2, bh / 2])
        base = torch.tensor(base)
        ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing='ij')
        centers = torch.stack([xs, ys, xs, ys], -1).reshape(-1, 1, 4).float() * stride + stride / 2
        all_anchors.append((centers + base[None]).reshape(-1, 4))
    return all_anchors


def bbox_overlaps(a, b):
    lt = torch.max(a[:, None, :2], b[None, :, :2])
    rb = torch.min(a[:, None, 2:], b[None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    return inter / (area_a[:, None] + area_b[None] - inter + 1e-6)


def bbox2delta(proposals, gt):
    pw, ph = proposals[:, 2] - proposals[:, 0], proposals[:, 3] - proposals[:, 1]
    px, py = proposals[:, 0] + 0.5 * pw, proposals[:, 1] + 0.5 * ph
    gw, gh = gt[:, 2] - gt[:, 0], gt[:, 3] - gt[:, 1]
    gx, gy = gt[:, 0] + 0.5 * gw, gt[:, 1] + 0.5 * gh
    return torch.stack([(gx - px) / pw, (gy - py) / ph, torch.log(gw / pw), torch.log(gh / ph)], -1)


# ---------------------------------------------------------------- dense_heads
class AnchorHead(nn.Module):
    def __init__(self, num_classes, in_channels, feat_channels, anchor_generator,
                 loss_cls, loss_bbox, train_cfg=None):
        super().__init__()
        self.num_classes = num_classes
        self.in_channels = in_channels
        self.feat_channels = feat_channels
        self.anchor_cfg = anchor_generator
        self.num_base_priors = len(anchor_generator['scales']) * len(anchor_generator['ratios'])
        self.cls_out_channels = num_classes
        self.loss_cls_cfg, self.loss_bbox_cfg = loss_cls, loss_bbox
        self.train_cfg = train_cfg
        self._init_layers()

    def forward(self, feats):
        return tuple(map(list, zip(*[self.forward_single(f) for f in feats])))

    def get_targets(self, anchors, gt_bboxes):
        cfg = self.train_cfg
        ious = bbox_overlaps(anchors, gt_bboxes)
        max_iou, argmax = ious.max(dim=1)
        labels = torch.full((anchors.size(0),), -1.0)
        labels[max_iou < cfg['neg_iou_thr']] = 0.0
        labels[max_iou >= cfg['pos_iou_thr']] = 1.0
        labels[ious.argmax(dim=0)] = 1.0
        targets = bbox2delta(anchors, gt_bboxes[argmax])
        return labels, targets

    def loss(self, cls_scores, bbox_preds, gt_bboxes, img_shape):
        sizes = [s.shape[-2:] for s in cls_scores]
        anchors = torch.cat(grid_anchors(sizes, **self.anchor_cfg))
        loss_cls, loss_bbox = 0.0, 0.0
        for img_id, gts in enumerate(gt_bboxes):
            scores = torch.cat([s[img_id].permute(1, 2, 0).reshape(-1) for s in cls_scores])
            deltas = torch.cat([b[img_id].permute(1, 2, 0).reshape(-1, 4) for b in bbox_preds])
            labels, targets = self.get_targets(anchors, gts)
            valid = labels >= 0
            pos = labels > 0
            loss_cls = loss_cls + F.binary_cross_entropy_with_logits(scores[valid], labels[valid])
            loss_bbox = loss_bbox + F.smooth_l1_loss(deltas[pos], targets[pos],
                                                     beta=self.loss_bbox_cfg['beta'])
        n = len(gt_bboxes)
        return dict(loss_rpn_cls=loss_cls / n * self.loss_cls_cfg['loss_weight'],
                    loss_rpn_bbox=loss_bbox / n * self.loss_bbox_cfg['loss_weight'])


class RPNHead(AnchorHead):
    """RPN head.

    Args:
        in_channels (int): Number of channels in the input feature map.
        num_convs (int): Number of convolution layers in the head. Default 1.
    """

    def __init__(self, in_channels, num_convs=1, **kwargs):
        self.num_convs = num_convs
        super(RPNHead, self).__init__(1, in_channels, **kwargs)

    def _init_layers(self):
        """Initialize layers of the head."""
        if self.num_convs > 1:
            rpn_convs = []
            for i in range(self.num_convs):
                if i == 0:
                    in_channels = self.in_channels
                else:
                    in_channels = self.feat_channels
                # use ``inplace=False`` to avoid error: one of the variables
                # needed for gradient computation has been modified by an
                # inplace operation.
                rpn_convs.append(
                    ConvModule(in_channels, self.feat_channels, 3, padding=1, inplace=False))
            self.rpn_conv = nn.Sequential(*rpn_convs)
        else:
            self.rpn_conv = nn.Conv2d(self.in_channels, self.feat_channels, 3, padding=1)
        self.rpn_cls = nn.Conv2d(self.feat_channels, self.num_base_priors * self.cls_out_channels, 1)
        self.rpn_reg = nn.Conv2d(self.feat_channels, self.num_base_priors * 4, 1)

    def forward_single(self, x):
        """Forward feature map of a single scale level."""
        x = self.rpn_conv(x)
        x = F.relu(x, inplace=False)
        rpn_cls_score = self.rpn_cls(x)
        rpn_bbox_pred = self.rpn_reg(x)
        return rpn_cls_score, rpn_bbox_pred


# ---------------------------------------------------------------- detector
class TwoStageDetector(nn.Module):
    def __init__(self, backbone, neck, rpn_head, train_cfg):
        super().__init__()
        self.backbone = TinyResNet(**backbone)
        self.neck = FPN(in_channels=list(backbone['widths']), **neck)
        self.rpn_head = RPNHead(train_cfg=train_cfg['rpn'], **rpn_head)

    def extract_feat(self, img):
        return self.neck(self.backbone(img))

    def forward_train(self, img, gt_bboxes):
        x = self.extract_feat(img)
        cls_scores, bbox_preds = self.rpn_head(x)
        return self.rpn_head.loss(cls_scores, bbox_preds, gt_bboxes, img.shape[-2:])

    @staticmethod
    def _parse_losses(losses):
        log_vars = OrderedDict()
        for name, value in losses.items():
            log_vars[name] = value.mean()
        loss = sum(v for k, v in log_vars.items() if 'loss' in k)
        log_vars['loss'] = loss
        return loss, {k: v.item() for k, v in log_vars.items()}


def synthetic_coco(num_imgs=8, size=64):
    for _ in range(num_imgs):
        img = torch.rand(3, size, size)
        x1, y1 = torch.randint(0, size // 2, (2,)).tolist()
        w, h = torch.randint(12, size // 2, (2,)).tolist()
        yield img, torch.tensor([[x1, y1, x1 + w, y1 + h]], dtype=torch.float)


def train_detector(model, epochs=2, samples_per_gpu=2):
    optimizer = torch.optim.SGD(model.parameters(), **optimizer_cfg)
    base_lr, it = optimizer_cfg['lr'], 0
    for epoch in range(epochs):
        model.train()
        data = list(synthetic_coco())
        for b in range(0, len(data), samples_per_gpu):
            batch = data[b:b + samples_per_gpu]
            imgs = torch.stack([d[0] for d in batch])
            gt_bboxes = [d[1] for d in batch]
            if it < lr_config['warmup_iters']:
                k = (1 - it / lr_config['warmup_iters']) * (1 - lr_config['warmup_ratio'])
                for g in optimizer.param_groups:
                    g['lr'] = base_lr * (1 - k)
            losses = model.forward_train(imgs, gt_bboxes)
            loss, log_vars = model._parse_losses(losses)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            it += 1
        print(f"Epoch [{epoch + 1}] " + ", ".join(f"{k}: {v:.4f}" for k, v in log_vars.items()))


model = TwoStageDetector(model_cfg['backbone'], model_cfg['neck'], model_cfg['rpn_head'],
                         model_cfg['train_cfg'])
train_detector(model)
