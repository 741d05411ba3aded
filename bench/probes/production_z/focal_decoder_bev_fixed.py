# expect: clean
# source: https://github.com/NVlabs/FocalFormer3D/issues/25
"""BEV 3D object detector with a query-based transformer decoder head
(FocalFormer3D style): a pillar-like BEV encoder produces a heatmap, the top-k
peaks become object queries, and a stack of decoder layers refines the queries,
with RoI features pooled from the BEV map around the predicted centers feeding
the next layer.  Trained on synthetic point-cloud scenes on CPU.
"""
import copy
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CFG = dict(
    seed=0,
    bev=dict(grid=16, in_channels=4, channels=32),
    head=dict(num_classes=3, num_proposals=12, hidden_channel=32, num_heads=4,
              num_decoder_layers=2, roi_feat=True, ffn_channel=64),
    train=dict(epochs=2, iters_per_epoch=3, batch_size=2, lr=2e-3, weight_decay=0.01),
    loss=dict(heatmap_weight=1.0, bbox_weight=0.25, cls_weight=1.0),
)


def set_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def synthetic_scene(cfg, batch_size, gen):
    g, c, k = cfg["bev"]["grid"], cfg["bev"]["in_channels"], cfg["head"]["num_classes"]
    bev = torch.randn(batch_size, c, g, g, generator=gen) * 0.1
    heat = torch.zeros(batch_size, k, g, g)
    boxes = []
    for b in range(batch_size):
        centers = torch.randint(1, g - 1, (3, 2), generator=gen)
        labels = torch.randint(0, k, (3,), generator=gen)
        for (x, y), lab in zip(centers.tolist(), labels.tolist()):
            bev[b, :, y, x] += 1.0
            heat[b, lab, y, x] = 1.0
        size = torch.rand(3, 3, generator=gen) + 0.5
        boxes.append(torch.cat([centers.float(), size], dim=1))
    return bev, heat, torch.stack(boxes)


class BEVEncoder(nn.Module):
    def __init__(self, in_ch, ch):
        super().__init__()
        self.blocks = nn.Sequential(
            nn.Conv2d(in_ch, ch, 3, padding=1), nn.BatchNorm2d(ch), nn.ReLU(),
            nn.Conv2d(ch, ch, 3, padding=1), nn.BatchNorm2d(ch), nn.ReLU(),
        )

    def forward(self, x):
        return self.blocks(x)


class DecoderLayer(nn.Module):
    def __init__(self, d, heads, ffn):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.cross_attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ffn = nn.Sequential(nn.Linear(d, ffn), nn.ReLU(), nn.Linear(ffn, d))
        self.norms = nn.ModuleList([nn.LayerNorm(d) for _ in range(3)])
        self.pos_embed = nn.Sequential(nn.Linear(2, d), nn.ReLU(), nn.Linear(d, d))

    def forward(self, query, key, query_pos, key_pos):
        # query: [B, C, P]  key: [B, C, HW]
        q = query.transpose(1, 2) + self.pos_embed(query_pos)
        k = key.transpose(1, 2) + self.pos_embed(key_pos)
        q = self.norms[0](q + self.self_attn(q, q, q)[0])
        q = self.norms[1](q + self.cross_attn(q, k, k)[0])
        q = self.norms[2](q + self.ffn(q))
        return q.transpose(1, 2)


class PredictionHead(nn.Module):
    def __init__(self, d, num_classes):
        super().__init__()
        self.heads = nn.ModuleDict({
            "center": nn.Conv1d(d, 2, 1), "dim": nn.Conv1d(d, 3, 1),
            "heatmap": nn.Conv1d(d, num_classes, 1),
        })

    def forward(self, x):
        return {name: head(x) for name, head in self.heads.items()}


class FocalDecoderHead(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h = cfg["head"]
        self.cfg = h
        d = h["hidden_channel"]
        self.shared_conv = nn.Conv2d(cfg["bev"]["channels"], d, 3, padding=1)
        self.heatmap_head = nn.Conv2d(d, h["num_classes"], 3, padding=1)
        self.class_encoding = nn.Conv1d(h["num_classes"], d, 1)
        self.decoder = nn.ModuleList([DecoderLayer(d, h["num_heads"], h["ffn_channel"])
                                      for _ in range(h["num_decoder_layers"])])
        self.prediction_heads = nn.ModuleList([PredictionHead(d, h["num_classes"])
                                               for _ in range(h["num_decoder_layers"])])
        self.roi_proj = nn.Sequential(nn.Linear(d, d), nn.ReLU())
        self._bev_pos_cache = {}

    def bev_pos(self, g):
        if g not in self._bev_pos_cache:
            ys, xs = torch.meshgrid(torch.arange(g), torch.arange(g), indexing="ij")
            self._bev_pos_cache[g] = torch.stack([xs, ys], -1).view(1, -1, 2).float() + 0.5
        return self._bev_pos_cache[g]

    def roi_pool(self, bev_feat, centers):
        g = bev_feat.shape[-1]
        grid = (centers.transpose(1, 2) / g * 2.0 - 1.0).unsqueeze(2)  # [B, P, 1, 2]
        pooled = F.grid_sample(bev_feat, grid, align_corners=False).squeeze(-1)  # [B, C, P]
        return self.roi_proj(pooled.transpose(1, 2)).transpose(1, 2)

    def forward(self, bev):
        feat = self.shared_conv(bev)
        b, c, g, _ = feat.shape
        dense_heatmap = self.heatmap_head(feat)
        heat = dense_heatmap.detach().sigmoid().view(b, -1)
        top = heat.topk(self.cfg["num_proposals"], dim=-1).indices
        cls_idx = top // (g * g)
        pos_idx = top % (g * g)
        flat = feat.view(b, c, -1)
        query_feat = flat.gather(2, pos_idx.unsqueeze(1).expand(-1, c, -1))
        one_hot = F.one_hot(cls_idx, self.cfg["num_classes"]).permute(0, 2, 1).float()
        query_feat = query_feat + self.class_encoding(one_hot)
        bev_pos = self.bev_pos(g).expand(b, -1, -1)
        query_pos = bev_pos.gather(1, pos_idx.unsqueeze(-1).expand(-1, -1, 2))

        ret_dicts = []
        for i, layer in enumerate(self.decoder):
            query_feat = layer(query_feat, flat, query_pos, bev_pos)
            res_layer = self.prediction_heads[i](query_feat)
            res_layer["center"] = res_layer["center"] + query_pos.transpose(1, 2)
            ret_dicts.append(res_layer)
            query_pos = res_layer["center"].detach().transpose(1, 2)
            if self.cfg["roi_feat"] and i < len(self.decoder) - 1:
                roi_feat = self.roi_pool(feat, res_layer["center"].detach())
                query_feat = query_feat + roi_feat
        return dense_heatmap, ret_dicts


def focal_heatmap_loss(pred, target, alpha=2.0, beta=4.0):
    pred = pred.sigmoid().clamp(1e-4, 1 - 1e-4)
    pos = target.eq(1).float()
    neg = 1 - pos
    pos_loss = torch.log(pred) * (1 - pred) ** alpha * pos
    neg_loss = torch.log(1 - pred) * pred ** alpha * (1 - target) ** beta * neg
    return -(pos_loss.sum() + neg_loss.sum()) / pos.sum().clamp(min=1.0)


def match_targets(pred_center, gt_boxes):
    # nearest ground-truth object for every proposal
    dist = torch.cdist(pred_center.transpose(1, 2), gt_boxes[..., :2])
    idx = dist.argmin(-1)
    return gt_boxes.gather(1, idx.unsqueeze(-1).expand(-1, -1, gt_boxes.shape[-1]))


class Detector(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.encoder = BEVEncoder(cfg["bev"]["in_channels"], cfg["bev"]["channels"])
        self.head = FocalDecoderHead(cfg)
        self.loss_cfg = cfg["loss"]

    def forward(self, bev):
        return self.head(self.encoder(bev))

    def loss(self, outputs, heat_gt, gt_boxes):
        dense_heatmap, ret_dicts = outputs
        losses = {"loss_heatmap": focal_heatmap_loss(dense_heatmap, heat_gt) * self.loss_cfg["heatmap_weight"]}
        for i, res in enumerate(ret_dicts):
            target = match_targets(res["center"].detach(), gt_boxes)
            box = torch.cat([res["center"], res["dim"]], dim=1).transpose(1, 2)
            losses[f"layer{i}_loss_bbox"] = F.l1_loss(box, target) * self.loss_cfg["bbox_weight"]
            cls_target = torch.zeros_like(res["heatmap"])
            losses[f"layer{i}_loss_cls"] = F.binary_cross_entropy_with_logits(
                res["heatmap"], cls_target) * self.loss_cfg["cls_weight"]
        return losses


class Runner:
    def __init__(self, cfg, model):
        self.cfg = cfg
        self.model = model
        t = cfg["train"]
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=t["lr"], weight_decay=t["weight_decay"])
        total = t["epochs"] * t["iters_per_epoch"]
        self.scheduler = torch.optim.lr_scheduler.OneCycleLR(self.optimizer, max_lr=t["lr"], total_steps=total)
        self.gen = torch.Generator().manual_seed(cfg["seed"])
        self.log = []

    def train_step(self, bev, heat, boxes):
        outputs = self.model(bev)
        losses = self.model.loss(outputs, heat, boxes)
        loss = sum(losses.values())
        self.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 10.0)
        self.optimizer.step()
        self.scheduler.step()
        return {k: v.item() for k, v in losses.items()}

    @torch.no_grad()
    def evaluate(self):
        self.model.eval()
        bev, heat, boxes = synthetic_scene(self.cfg, 2, self.gen)
        _, ret = self.model(bev)
        err = (match_targets(ret[-1]["center"], boxes)[..., :2] - ret[-1]["center"].transpose(1, 2)).abs()
        return err.mean().item()

    def run(self):
        t = self.cfg["train"]
        for epoch in range(t["epochs"]):
            self.model.train()
            for it in range(t["iters_per_epoch"]):
                batch = synthetic_scene(self.cfg, t["batch_size"], self.gen)
                self.log.append(self.train_step(*batch))
            print(f"epoch {epoch}: center err {self.evaluate():.3f}")


def main():
    cfg = copy.deepcopy(CFG)
    set_seed(cfg["seed"])
    model = Detector(cfg)
    Runner(cfg, model).run()


if __name__ == "__main__":
    main()
