# expect: clean
# source: https://github.com/open-mmlab/mmdetection3d/issues/1334
"""PointPillars 3-D detector with an FPN neck (nuScenes-style config).

Mirrors the mmdetection3d layout: a nested model config, a pillar feature net over
voxelised points, a PointPillarsScatter to a BEV canvas, a SECOND backbone, an FPN neck
built from ConvModules (conv + norm + optional activation from act_cfg) and an anchor
head with classification / box / direction branches.  A runner with an optimizer hook
(grad clip), cyclic LR and a validation hook.  Synthetic point clouds, CPU only.
"""
import copy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

voxel_size = [0.5, 0.5, 8]
point_cloud_range = [-16, -16, -5, 16, 16, 3]
model_cfg = dict(
    type='MVXFasterRCNN',
    pts_voxel_encoder=dict(type='HardVFE', in_channels=4, feat_channels=[32, 32]),
    pts_middle_encoder=dict(type='PointPillarsScatter', in_channels=32, output_shape=[64, 64]),
    pts_backbone=dict(type='SECOND', in_channels=32, layer_nums=[1, 2, 2],
                      layer_strides=[2, 2, 2], out_channels=[32, 64, 128],
                      norm_cfg=dict(type='BN2d', eps=1e-3, momentum=0.01)),
    pts_neck=dict(type='FPN', norm_cfg=dict(type='BN2d', eps=1e-3, momentum=0.01),
                  act_cfg=dict(type='ReLU'), in_channels=[32, 64, 128], out_channels=64,
                  start_level=0, num_outs=3),
    pts_bbox_head=dict(type='Anchor3DHead', num_classes=4, in_channels=64, num_anchors=2,
                       box_code_size=9, loss_weights=dict(cls=1.0, bbox=1.0, dir=0.2)),
)
train_cfg = dict(max_iters=3, grad_clip=dict(max_norm=35, norm_type=2), lr=1e-3, interval=2)


def build_norm_layer(cfg, num_features):
    cfg = copy.deepcopy(cfg)
    layer_type = cfg.pop('type')
    assert layer_type in ('BN2d', 'naiveSyncBN2d', 'BN1d')
    if layer_type == 'BN1d':
        return nn.BatchNorm1d(num_features, **cfg)
    return nn.BatchNorm2d(num_features, **cfg)


def build_activation_layer(cfg):
    if cfg['type'] == 'ReLU':
        return nn.ReLU(inplace=cfg.get('inplace', True))
    raise KeyError(cfg['type'])


class ConvModule(nn.Module):
    """conv / norm / activation block, configured like mmcv.cnn.ConvModule."""

    def __init__(self, in_channels, out_channels, kernel_size, padding=0, stride=1,
                 norm_cfg=None, act_cfg=dict(type='ReLU')):
        super().__init__()
        self.with_norm = norm_cfg is not None
        self.with_activation = act_cfg is not None
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride,
                              padding=padding, bias=not self.with_norm)
        if self.with_norm:
            self.bn = build_norm_layer(norm_cfg, out_channels)
        if self.with_activation:
            self.activate = build_activation_layer(act_cfg)

    def forward(self, x):
        x = self.conv(x)
        if self.with_norm:
            x = self.bn(x)
        if self.with_activation:
            x = self.activate(x)
        return x


class HardVFE(nn.Module):
    def __init__(self, in_channels, feat_channels):
        super().__init__()
        layers, c = [], in_channels + 3
        for out_c in feat_channels:
            layers += [nn.Linear(c, out_c, bias=False), nn.BatchNorm1d(out_c, eps=1e-3, momentum=0.01), nn.ReLU()]
            c = out_c
        self.vfe = nn.Sequential(*layers)

    def forward(self, voxels, num_points):
        mean = voxels[..., :3].sum(1, keepdim=True) / num_points.view(-1, 1, 1)
        feats = torch.cat([voxels, voxels[..., :3] - mean], dim=-1)
        n, p, c = feats.shape
        feats = self.vfe(feats.view(n * p, c)).view(n, p, -1)
        return feats.max(dim=1).values


class PointPillarsScatter(nn.Module):
    def __init__(self, in_channels, output_shape):
        super().__init__()
        self.in_channels = in_channels
        self.ny, self.nx = output_shape

    def forward(self, voxel_features, coors, batch_size):
        canvases = []
        for b in range(batch_size):
            mask = coors[:, 0] == b
            canvas = voxel_features.new_zeros(self.in_channels, self.nx * self.ny)
            idx = coors[mask, 2] * self.nx + coors[mask, 3]
            canvas = canvas.index_put((torch.arange(self.in_channels)[:, None], idx[None]),
                                      voxel_features[mask].t())
            canvases.append(canvas.view(self.in_channels, self.ny, self.nx))
        return torch.stack(canvases, 0)


class SECOND(nn.Module):
    def __init__(self, in_channels, layer_nums, layer_strides, out_channels, norm_cfg):
        super().__init__()
        blocks, c = [], in_channels
        for num, stride, out_c in zip(layer_nums, layer_strides, out_channels):
            block = [ConvModule(c, out_c, 3, padding=1, stride=stride, norm_cfg=norm_cfg)]
            block += [ConvModule(out_c, out_c, 3, padding=1, norm_cfg=norm_cfg) for _ in range(num)]
            blocks.append(nn.Sequential(*block))
            c = out_c
        self.blocks = nn.ModuleList(blocks)

    def forward(self, x):
        outs = []
        for block in self.blocks:
            x = block(x)
            outs.append(x)
        return tuple(outs)


class FPN(nn.Module):
    def __init__(self, in_channels, out_channels, num_outs, start_level=0, norm_cfg=None, act_cfg=None):
        super().__init__()
        self.in_channels = in_channels
        self.start_level = start_level
        self.num_outs = num_outs
        self.lateral_convs = nn.ModuleList()
        self.fpn_convs = nn.ModuleList()
        for i in range(start_level, len(in_channels)):
            self.lateral_convs.append(ConvModule(in_channels[i], out_channels, 1,
                                                 norm_cfg=norm_cfg, act_cfg=act_cfg))
            self.fpn_convs.append(ConvModule(out_channels, out_channels, 3, padding=1,
                                             norm_cfg=norm_cfg, act_cfg=act_cfg))

    def forward(self, inputs):
        assert len(inputs) == len(self.in_channels)
        laterals = [
            lateral_conv(inputs[i + self.start_level])
            for i, lateral_conv in enumerate(self.lateral_convs)
        ]
        used_backbone_levels = len(laterals)
        for i in range(used_backbone_levels - 1, 0, -1):
            prev_shape = laterals[i - 1].shape[2:]
            laterals[i - 1] = laterals[i - 1] + F.interpolate(laterals[i], size=prev_shape, mode='nearest')
        outs = [self.fpn_convs[i](laterals[i]) for i in range(used_backbone_levels)]
        return tuple(outs)


class Anchor3DHead(nn.Module):
    def __init__(self, num_classes, in_channels, num_anchors, box_code_size, loss_weights):
        super().__init__()
        self.num_classes = num_classes
        self.num_anchors = num_anchors
        self.box_code_size = box_code_size
        self.loss_weights = loss_weights
        self.conv_cls = nn.Conv2d(in_channels, num_anchors * num_classes, 1)
        self.conv_reg = nn.Conv2d(in_channels, num_anchors * box_code_size, 1)
        self.conv_dir_cls = nn.Conv2d(in_channels, num_anchors * 2, 1)

    def forward_single(self, x):
        return self.conv_cls(x), self.conv_reg(x), self.conv_dir_cls(x)

    def loss(self, feats, targets):
        total = dict(loss_cls=0.0, loss_bbox=0.0, loss_dir=0.0)
        for x in feats:
            cls, reg, dirs = self.forward_single(x)
            b, _, h, w = cls.shape
            cls = cls.permute(0, 2, 3, 1).reshape(-1, self.num_classes)
            reg = reg.permute(0, 2, 3, 1).reshape(-1, self.box_code_size)
            dirs = dirs.permute(0, 2, 3, 1).reshape(-1, 2)
            labels, boxes, dir_labels = targets(cls.shape[0])
            total['loss_cls'] = total['loss_cls'] + self.loss_weights['cls'] * torchvision_focal(cls, labels)
            total['loss_bbox'] = total['loss_bbox'] + self.loss_weights['bbox'] * F.smooth_l1_loss(reg, boxes, beta=1 / 9)
            total['loss_dir'] = total['loss_dir'] + self.loss_weights['dir'] * F.cross_entropy(dirs, dir_labels)
        return total


def torchvision_focal(logits, labels, alpha=0.25, gamma=2.0):
    target = F.one_hot(labels, logits.shape[-1]).float()
    p = logits.sigmoid()
    ce = F.binary_cross_entropy_with_logits(logits, target, reduction='none')
    p_t = p * target + (1 - p) * (1 - target)
    loss = ce * ((1 - p_t) ** gamma)
    return (alpha * target * loss + (1 - alpha) * (1 - target) * loss).mean()


class MVXFasterRCNN(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        cfg = copy.deepcopy(cfg)
        [c.pop('type') for c in cfg.values() if isinstance(c, dict)]
        self.pts_voxel_encoder = HardVFE(**cfg['pts_voxel_encoder'])
        self.pts_middle_encoder = PointPillarsScatter(**cfg['pts_middle_encoder'])
        self.pts_backbone = SECOND(**cfg['pts_backbone'])
        self.pts_neck = FPN(**cfg['pts_neck'])
        self.pts_bbox_head = Anchor3DHead(**cfg['pts_bbox_head'])

    def extract_pts_feat(self, voxels, num_points, coors, batch_size):
        voxel_features = self.pts_voxel_encoder(voxels, num_points)
        x = self.pts_middle_encoder(voxel_features, coors, batch_size)
        x = self.pts_backbone(x)
        return self.pts_neck(x)

    def forward_train(self, voxels, num_points, coors, batch_size, targets):
        feats = self.extract_pts_feat(voxels, num_points, coors, batch_size)
        return self.pts_bbox_head.loss(feats, targets)


def voxelize(batch_points, grid=(64, 64), max_points=8):
    voxels, num_points, coors = [], [], []
    for b, pts in enumerate(batch_points):
        ix = ((pts[:, 0] - point_cloud_range[0]) / voxel_size[0]).long().clamp(0, grid[1] - 1)
        iy = ((pts[:, 1] - point_cloud_range[1]) / voxel_size[1]).long().clamp(0, grid[0] - 1)
        keys = iy * grid[1] + ix
        for key in torch.unique(keys)[:200]:
            sel = pts[keys == key][:max_points]
            pad = sel.new_zeros(max_points, sel.shape[1])
            pad[:len(sel)] = sel
            voxels.append(pad)
            num_points.append(len(sel))
            coors.append([b, 0, int(key) // grid[1], int(key) % grid[1]])
    return torch.stack(voxels), torch.tensor(num_points, dtype=torch.float32), torch.tensor(coors)


def make_targets(seed):
    g = torch.Generator().manual_seed(seed)

    def targets(n):
        return (torch.randint(0, 4, (n,), generator=g), torch.randn(n, 9, generator=g) * 0.1,
                torch.randint(0, 2, (n,), generator=g))
    return targets


class Runner:
    def __init__(self, model, cfg):
        self.model = model
        self.cfg = cfg
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=cfg['lr'], weight_decay=0.01)
        self.scheduler = torch.optim.lr_scheduler.CyclicLR(
            self.optimizer, base_lr=cfg['lr'] / 10, max_lr=cfg['lr'], step_size_up=2,
            cycle_momentum=False)
        self.iter = 0

    def train_step(self, data):
        losses = self.model.forward_train(**data)
        loss = sum(losses.values())
        self.optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), **self.cfg['grad_clip'])
        self.optimizer.step()
        self.scheduler.step()
        return {k: float(v) for k, v in losses.items()}

    def run(self, data_iter):
        self.model.train()
        for data in data_iter:
            log = self.train_step(data)
            if self.iter % self.cfg['interval'] == 0:
                print(f"iter {self.iter}", ", ".join(f"{k}: {v:.4f}" for k, v in log.items()))
            self.iter += 1


def synthetic_scenes(num_iters, batch_size=2, seed=0):
    rng = np.random.RandomState(seed)
    for it in range(num_iters):
        pts = [torch.from_numpy(np.concatenate([rng.uniform(-15, 15, (600, 2)), rng.uniform(-4, 2, (600, 1)),
                                                rng.uniform(0, 1, (600, 1))], 1).astype(np.float32))
               for _ in range(batch_size)]
        voxels, num_points, coors = voxelize(pts)
        yield dict(voxels=voxels, num_points=num_points, coors=coors, batch_size=batch_size,
                   targets=make_targets(seed + it))


def main():
    torch.manual_seed(0)
    model = MVXFasterRCNN(model_cfg)
    runner = Runner(model, train_cfg)
    runner.run(synthetic_scenes(train_cfg['max_iters']))


if __name__ == '__main__':
    main()
