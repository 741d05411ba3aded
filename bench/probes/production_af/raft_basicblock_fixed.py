# expect: clean
# source: https://github.com/open-mmlab/mmflow/pull/252
"""RAFT-style optical flow estimator, fine-tuned on KITTI-like crops.

Keeps the layout of an mmflow model: a config dict (model / optimizer / lr_config /
runner), a RAFTEncoder built from ResLayers of BasicBlocks (feature encoder with
InstanceNorm, context encoder with BatchNorm that can be frozen), an all-pairs
correlation volume with a lookup, a ConvGRU update block iterated a few times, a
SequenceLoss and an iteration-based runner with AdamW + OneCycle.  Tiny synthetic
image pairs with a known translation as ground-truth flow, CPU only.
"""
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

cfg = dict(
    model=dict(
        encoder=dict(in_channels=3, out_channels=32, base_channels=(16, 24, 32), norm_cfg=dict(type='IN')),
        cxt_encoder=dict(in_channels=3, out_channels=32, base_channels=(16, 24, 32), norm_cfg=dict(type='BN')),
        decoder=dict(radius=2, iters=3, h_channels=16, cxt_channels=16,
                     flow_loss=dict(type='SequenceLoss', gamma=0.85)),
        freeze_bn=True,
    ),
    optimizer=dict(type='AdamW', lr=1.25e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-5),
    optimizer_config=dict(grad_clip=dict(max_norm=1.0)),
    lr_config=dict(policy='OneCycle', max_lr=1.25e-4, total_steps=12, pct_start=0.05),
    runner=dict(type='IterBasedRunner', max_iters=3),
    seed=0,
)


def build_norm_layer(norm_cfg, num_features):
    if norm_cfg is None:
        return nn.Identity()
    if norm_cfg['type'] == 'BN':
        return nn.BatchNorm2d(num_features)
    if norm_cfg['type'] == 'IN':
        return nn.InstanceNorm2d(num_features, affine=True)
    raise KeyError(norm_cfg['type'])


class BasicBlock(nn.Module):
    """Basic block for ResNet."""

    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None, norm_cfg=dict(type='BN')):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride=stride, padding=1, bias=True)
        self.norm1 = build_norm_layer(norm_cfg, planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=True)
        self.norm2 = build_norm_layer(norm_cfg, planes)
        self.relu = nn.ReLU()
        self.downsample = downsample

    def forward(self, x):

        def _inner_forward(x):
            identity = x

            out = self.conv1(x)
            out = self.norm1(out)
            out = self.relu(out)

            out = self.conv2(out)
            out = self.norm2(out)
            out = self.relu(out)

            if self.downsample is not None:
                identity = self.downsample(x)

            out = out + identity

            return out

        out = _inner_forward(x)
        out = self.relu(out)
        return out


class ResLayer(nn.Sequential):
    def __init__(self, block, inplanes, planes, num_blocks, stride=1, norm_cfg=dict(type='BN')):
        downsample = None
        if stride != 1 or inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes * block.expansion, 1, stride=stride, bias=True),
                build_norm_layer(norm_cfg, planes * block.expansion))
        layers = [block(inplanes, planes, stride, downsample, norm_cfg)]
        for _ in range(1, num_blocks):
            layers.append(block(planes, planes, 1, None, norm_cfg))
        super().__init__(*layers)


class RAFTEncoder(nn.Module):
    def __init__(self, in_channels, out_channels, base_channels, norm_cfg):
        super().__init__()
        stem = base_channels[0]
        self.conv1 = nn.Conv2d(in_channels, stem, 7, stride=2, padding=3)
        self.norm1 = build_norm_layer(norm_cfg, stem)
        self.relu = nn.ReLU(inplace=True)
        self.res_layers = []
        inplanes = stem
        for i, (planes, stride) in enumerate(zip(base_channels, (1, 2, 2))):
            layer = ResLayer(BasicBlock, inplanes, planes, 2, stride, norm_cfg)
            self.add_module(f'res_layer{i + 1}', layer)
            self.res_layers.append(f'res_layer{i + 1}')
            inplanes = planes
        self.conv2 = nn.Conv2d(inplanes, out_channels, 1)

    def forward(self, x):
        x = self.relu(self.norm1(self.conv1(x)))
        for name in self.res_layers:
            x = getattr(self, name)(x)
        return self.conv2(x)


def coords_grid(b, h, w):
    ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing='ij')
    return torch.stack([xs, ys], 0).float()[None].repeat(b, 1, 1, 1)


class CorrLookup(nn.Module):
    def __init__(self, radius):
        super().__init__()
        self.radius = radius

    def forward(self, corr, coords):
        b, h, w, _, _ = corr.shape
        r = self.radius
        d = torch.arange(-r, r + 1, dtype=coords.dtype)
        delta = torch.stack(torch.meshgrid(d, d, indexing='ij'), -1).view(1, -1, 1, 1, 2)
        centroid = coords.permute(0, 2, 3, 1).unsqueeze(1)            # B,1,H,W,2
        pts = centroid + delta.flip(-1)                                # B,K,H,W,2
        grid = torch.stack([2 * pts[..., 0] / (w - 1) - 1, 2 * pts[..., 1] / (h - 1) - 1], -1)
        vol = corr.view(b * h * w, 1, h, w)
        grid = grid.permute(0, 2, 3, 1, 4).reshape(b * h * w, 1, -1, 2)
        out = F.grid_sample(vol, grid, align_corners=True)
        return out.view(b, h, w, -1).permute(0, 3, 1, 2)


class ConvGRU(nn.Module):
    def __init__(self, h, x):
        super().__init__()
        self.convz = nn.Conv2d(h + x, h, 3, padding=1)
        self.convr = nn.Conv2d(h + x, h, 3, padding=1)
        self.convq = nn.Conv2d(h + x, h, 3, padding=1)

    def forward(self, h, x):
        hx = torch.cat([h, x], 1)
        z = torch.sigmoid(self.convz(hx))
        r = torch.sigmoid(self.convr(hx))
        q = torch.tanh(self.convq(torch.cat([r * h, x], 1)))
        return (1 - z) * h + z * q


class RAFTDecoder(nn.Module):
    def __init__(self, radius, iters, h_channels, cxt_channels, flow_loss):
        super().__init__()
        self.iters = iters
        self.h_channels = h_channels
        self.corr_lookup = CorrLookup(radius)
        k = (2 * radius + 1) ** 2
        self.motion = nn.Sequential(nn.Conv2d(k + 2, 32, 3, padding=1), nn.ReLU())
        self.gru = ConvGRU(h_channels, 32 + cxt_channels)
        self.flow_pred = nn.Conv2d(h_channels, 2, 3, padding=1)
        self.gamma = flow_loss['gamma']

    def forward(self, feat1, feat2, h_feat, cxt_feat):
        b, c, h, w = feat1.shape
        corr = torch.einsum('bchw,bcuv->bhwuv', feat1, feat2) / c ** 0.5
        coords0 = coords_grid(b, h, w)
        coords1 = coords0.clone()
        preds = []
        for _ in range(self.iters):
            coords1 = coords1.detach()
            corr_feat = self.corr_lookup(corr, coords1)
            flow = coords1 - coords0
            motion = self.motion(torch.cat([corr_feat, flow], 1))
            h_feat = self.gru(h_feat, torch.cat([motion, cxt_feat], 1))
            coords1 = coords1 + self.flow_pred(h_feat)
            preds.append(8 * F.interpolate(coords1 - coords0, scale_factor=8, mode='bilinear', align_corners=True))
        return preds

    def losses(self, preds, flow_gt):
        n = len(preds)
        return sum(self.gamma ** (n - i - 1) * (p - flow_gt).abs().mean() for i, p in enumerate(preds))


class RAFT(nn.Module):
    def __init__(self, encoder, cxt_encoder, decoder, freeze_bn=False):
        super().__init__()
        self.encoder = RAFTEncoder(**encoder)
        self.context = RAFTEncoder(**cxt_encoder)
        self.decoder = RAFTDecoder(**decoder)
        self.h_channels = decoder['h_channels']
        self.cxt_channels = decoder['cxt_channels']
        self.freeze_bn = freeze_bn

    def train(self, mode=True):
        super().train(mode)
        if mode and self.freeze_bn:
            for m in self.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.eval()
        return self

    def forward_train(self, imgs, flow_gt):
        img1, img2 = imgs[:, :3], imgs[:, 3:]
        feat1, feat2 = self.encoder(img1), self.encoder(img2)
        cxt = self.context(img1)
        h_feat, cxt_feat = torch.split(cxt, [self.h_channels, self.cxt_channels], dim=1)
        preds = self.decoder(feat1, feat2, torch.tanh(h_feat), torch.relu(cxt_feat))
        return dict(loss_flow=self.decoder.losses(preds, flow_gt))


def synthetic_pairs(n, h=64, w=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    for _ in range(n):
        img1 = torch.rand(2, 3, h, w, generator=g)
        dx, dy = 2, 1
        img2 = torch.roll(img1, shifts=(dy, dx), dims=(2, 3))
        flow = torch.zeros(2, 2, h, w)
        flow[:, 0], flow[:, 1] = dx, dy
        yield dict(imgs=torch.cat([img1, img2], 1), flow_gt=flow)


class IterBasedRunner:
    def __init__(self, model, cfg):
        self.model = model
        opt_cfg = copy.deepcopy(cfg['optimizer'])
        opt_cfg.pop('type')
        self.optimizer = torch.optim.AdamW(model.parameters(), **opt_cfg)
        lr_cfg = cfg['lr_config']
        self.scheduler = torch.optim.lr_scheduler.OneCycleLR(
            self.optimizer, max_lr=lr_cfg['max_lr'], total_steps=lr_cfg['total_steps'],
            pct_start=lr_cfg['pct_start'], anneal_strategy='linear')
        self.grad_clip = cfg['optimizer_config']['grad_clip']
        self.max_iters = cfg['runner']['max_iters']
        self.iter = 0

    def train_step(self, data_batch):
        losses = self.model.forward_train(**data_batch)
        loss = sum(losses.values())
        self.optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), **self.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        return loss.item()

    def run(self, data_loader):
        self.model.train()
        for data_batch in data_loader:
            if self.iter >= self.max_iters:
                break
            loss = self.train_step(data_batch)
            print(f'iter {self.iter}: loss_flow={loss:.4f}')
            self.iter += 1


def main():
    torch.manual_seed(cfg['seed'])
    model = RAFT(**cfg['model'])
    runner = IterBasedRunner(model, cfg)
    runner.run(synthetic_pairs(cfg['runner']['max_iters'], seed=cfg['seed']))


if __name__ == '__main__':
    main()
