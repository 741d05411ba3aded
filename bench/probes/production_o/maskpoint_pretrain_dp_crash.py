# expect: nonscalar_backward
# source: https://github.com/WisconsinAIVision/MaskPoint/issues/7
"""MaskPoint (discriminative masked point modelling) pre-training on synthetic
shapes, run the way tools/runner_pretrain.py runs it without --launcher, i.e.
wrapped in DataParallel ("Using Data parallel ...").

models/MaskPoint.py is reduced to a point tokenizer (FPS + kNN groups), a
mini-PointNet patch encoder, a transformer over visible patches and a
decoder that classifies real vs. fake query points (loss_1) plus a
global-feature contrastive term (loss_2).
"""
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

config = SimpleNamespace(
    model=SimpleNamespace(NAME='MaskPoint', trans_dim=32, depth=2, num_heads=4, group_size=8,
                          num_group=16, mask_ratio=0.75, num_queries=32, nce_t=0.2),
    dataset=SimpleNamespace(npoints=256, batch_size=4),
    optimizer=SimpleNamespace(lr=1e-3, weight_decay=0.05),
    max_epoch=2, step_per_update=1, grad_norm_clip=10)
args = SimpleNamespace(distributed=False, use_gpu=False, local_rank=0, resume=False, start_ckpts=None)


# ------------------------------------------------------------ utils/misc.py, AverageMeter
def fps(xyz, npoint):
    B, N, _ = xyz.shape
    centroids = torch.zeros(B, npoint, dtype=torch.long)
    distance = torch.full((B, N), 1e10)
    farthest = torch.zeros(B, dtype=torch.long)
    batch_indices = torch.arange(B)
    for i in range(npoint):
        centroids[:, i] = farthest
        centroid = xyz[batch_indices, farthest, :].view(B, 1, 3)
        dist = torch.sum((xyz - centroid) ** 2, -1)
        distance = torch.min(distance, dist)
        farthest = torch.max(distance, -1)[1]
    return xyz[batch_indices[:, None], centroids]


class AverageMeter(object):
    def __init__(self, items=None):
        self.items = items
        self.n_items = 1 if items is None else len(items)
        self._sum = [0] * self.n_items
        self._count = [0] * self.n_items

    def update(self, values):
        for idx, v in enumerate(values):
            self._sum[idx] += v
            self._count[idx] += 1

    def avg(self):
        return [s / max(c, 1) for s, c in zip(self._sum, self._count)]


class DataParallel(nn.Module):
    """Stand-in for torch.nn.DataParallel on two devices: scatter the batch on
    dim 0, run one replica per device and gather the outputs on dim 0 (scalar
    outputs are unsqueezed and returned as a vector, as nn.parallel.Gather does)."""

    def __init__(self, module, device_ids=(0, 1)):
        super().__init__()
        self.module = module
        self.device_ids = list(device_ids)

    def scatter(self, inputs):
        chunks = [t.chunk(len(self.device_ids), dim=0) for t in inputs]
        return [tuple(c[i] for c in chunks) for i in range(len(self.device_ids))]

    def gather(self, outputs):
        if isinstance(outputs[0], (tuple, list)):
            return type(outputs[0])(self.gather([o[i] for o in outputs]) for i in range(len(outputs[0])))
        return torch.cat([o.unsqueeze(0) if o.dim() == 0 else o for o in outputs], dim=0)

    def forward(self, *inputs):
        replicas = [self.module for _ in self.device_ids]
        outputs = [replica(*inp) for replica, inp in zip(replicas, self.scatter(inputs))]
        return self.gather(outputs)


# ------------------------------------------------------------ models/MaskPoint.py
class Group(nn.Module):
    def __init__(self, num_group, group_size):
        super().__init__()
        self.num_group = num_group
        self.group_size = group_size

    def forward(self, xyz):
        center = fps(xyz, self.num_group)                       # B G 3
        dist = torch.cdist(center, xyz)                          # B G N
        idx = dist.topk(self.group_size, dim=-1, largest=False)[1]
        neighborhood = torch.gather(xyz[:, None].expand(-1, self.num_group, -1, -1), 2,
                                    idx[..., None].expand(-1, -1, -1, 3))
        return neighborhood - center.unsqueeze(2), center


class Encoder(nn.Module):
    def __init__(self, encoder_channel):
        super().__init__()
        self.first_conv = nn.Sequential(nn.Conv1d(3, 32, 1), nn.BatchNorm1d(32), nn.ReLU(), nn.Conv1d(32, 64, 1))
        self.second_conv = nn.Sequential(nn.Conv1d(128, 64, 1), nn.BatchNorm1d(64), nn.ReLU(),
                                         nn.Conv1d(64, encoder_channel, 1))

    def forward(self, point_groups):
        bs, g, n, _ = point_groups.shape
        x = point_groups.reshape(bs * g, n, 3).transpose(2, 1)
        feature = self.first_conv(x)
        feature_global = torch.max(feature, dim=2, keepdim=True)[0]
        feature = torch.cat([feature_global.expand(-1, -1, n), feature], dim=1)
        feature = self.second_conv(feature)
        return torch.max(feature, dim=2)[0].reshape(bs, g, -1)


class MaskPoint(nn.Module):
    def __init__(self, config):
        super().__init__()
        c = config
        self.mask_ratio, self.num_queries, self.nce_t = c.mask_ratio, c.num_queries, c.nce_t
        self.group_divider = Group(c.num_group, c.group_size)
        self.encoder = Encoder(c.trans_dim)
        self.pos_embed = nn.Sequential(nn.Linear(3, 64), nn.GELU(), nn.Linear(64, c.trans_dim))
        layer = nn.TransformerEncoderLayer(c.trans_dim, c.num_heads, c.trans_dim * 2, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, c.depth)
        dec_layer = nn.TransformerDecoderLayer(c.trans_dim, c.num_heads, c.trans_dim * 2, batch_first=True)
        self.decoder = nn.TransformerDecoder(dec_layer, 1)
        self.query_embed = nn.Sequential(nn.Linear(3, 64), nn.GELU(), nn.Linear(64, c.trans_dim))
        self.bin_cls_head = nn.Linear(c.trans_dim, 1)
        self.proj = nn.Linear(c.trans_dim, c.trans_dim)

    def _mask_center(self, center):
        B, G, _ = center.shape
        n_keep = int(G * (1 - self.mask_ratio))
        noise = torch.rand(B, G)
        ids = noise.argsort(dim=1)
        return ids[:, :n_keep], ids[:, n_keep:]

    def _encode(self, neighborhood, center, vis_idx):
        tokens = self.encoder(neighborhood)
        take = lambda t: torch.gather(t, 1, vis_idx[..., None].expand(-1, -1, t.shape[-1]))
        x = take(tokens) + self.pos_embed(take(center))
        return self.blocks(x)

    def forward(self, pts):
        neighborhood, center = self.group_divider(pts)
        vis_idx, mask_idx = self._mask_center(center)
        memory = self._encode(neighborhood, center, vis_idx)
        # real queries: points of masked patches; fake queries: uniform noise in the bbox
        B = pts.shape[0]
        masked = torch.gather(neighborhood + center.unsqueeze(2), 1,
                              mask_idx[..., None, None].expand(-1, -1, neighborhood.shape[2], 3))
        masked = masked.reshape(B, -1, 3)
        real = masked[:, torch.randperm(masked.shape[1])[:self.num_queries // 2]]
        fake = torch.rand(B, self.num_queries // 2, 3) * 2 - 1
        queries = torch.cat([real, fake], dim=1)
        labels = torch.cat([torch.ones(B, real.shape[1]), torch.zeros(B, fake.shape[1])], dim=1)
        q = self.decoder(self.query_embed(queries), memory)
        loss_1 = F.binary_cross_entropy_with_logits(self.bin_cls_head(q).squeeze(-1), labels)
        # contrastive term between two maskings of the same shape
        vis_idx2, _ = self._mask_center(center)
        z1 = F.normalize(self.proj(memory.max(1)[0]), dim=-1)
        z2 = F.normalize(self.proj(self._encode(neighborhood, center, vis_idx2).max(1)[0]), dim=-1)
        logits = z1 @ z2.t() / self.nce_t
        loss_2 = F.cross_entropy(logits, torch.arange(B))
        return loss_1, loss_2


# ------------------------------------------------------------ tools/builder.py
def model_builder(config):
    return MaskPoint(config)


def build_opti_sche(base_model, config):
    optimizer = torch.optim.AdamW(base_model.parameters(), lr=config.optimizer.lr,
                                  weight_decay=config.optimizer.weight_decay)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=config.max_epoch)
    return optimizer, scheduler


def shapenet_loader(n_batches, bs, npoints):
    for _ in range(n_batches):
        u = torch.randn(bs, npoints, 3)
        radius = 0.5 + 0.5 * torch.rand(bs, 1, 1)
        yield None, None, u / u.norm(dim=-1, keepdim=True) * radius


# ------------------------------------------------------------ tools/runner_pretrain.py
def run_net(args, config):
    base_model = model_builder(config.model)
    if args.distributed:
        raise NotImplementedError
    else:
        print('Using Data parallel ...')
        base_model = DataParallel(base_model)
    optimizer, scheduler = build_opti_sche(base_model, config)

    base_model.zero_grad()
    for epoch in range(0, config.max_epoch):
        base_model.train()
        losses = AverageMeter(['Loss1', 'Loss2'])
        num_iter = 0
        for idx, (taxonomy_ids, model_ids, data) in enumerate(
                shapenet_loader(3, config.dataset.batch_size, config.dataset.npoints)):
            num_iter += 1
            points = data
            assert points.size(1) == config.dataset.npoints

            loss_1, loss_2 = base_model(points)

            _loss = loss_1 + loss_2

            _loss.backward()  # raises

            if num_iter == config.step_per_update:
                torch.nn.utils.clip_grad_norm_(base_model.parameters(), config.grad_norm_clip, norm_type=2)
                num_iter = 0
                optimizer.step()
                base_model.zero_grad()

            losses.update([loss_1.item(), loss_2.item()])
        scheduler.step()
        print('[Training] EPOCH: %d Losses = %s' % (epoch, ['%.4f' % l for l in losses.avg()]))


run_net(args, config)
