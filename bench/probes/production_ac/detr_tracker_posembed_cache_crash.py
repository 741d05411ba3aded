# expect: inference_tensor
# source: https://github.com/roboflow/rf-detr/issues/461
"""Tracking-by-detection with a small DETR-style detector on a DINOv2-like backbone.

The backbone embeds patches and adds interpolated position embeddings (memoised
per input resolution), a transformer encoder and a query decoder predict boxes
and objectness; a greedy IoU tracker links detections over a synthetic video
of moving squares.  The runner fine-tunes the detector and periodically runs
the tracker on a validation clip (predict path under inference mode), then
resumes training.
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class RunConfig:
    image_size: int = 32
    patch_size: int = 4
    hidden_dim: int = 32
    num_queries: int = 4
    num_objects: int = 2
    base_grid: int = 4
    lr: float = 1e-3
    lr_backbone: float = 1e-4
    epochs: int = 3
    steps_per_epoch: int = 4
    track_every: int = 1
    iou_thresh: float = 0.3
    seed: int = 0


class WindowedDinov2Embeddings(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.patch_size = cfg.patch_size
        self.patch_embeddings = nn.Conv2d(3, cfg.hidden_dim, cfg.patch_size, cfg.patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, cfg.hidden_dim))
        self.position_embeddings = nn.Parameter(torch.randn(1, cfg.base_grid * cfg.base_grid, cfg.hidden_dim) * 0.02)
        self.position_scale = nn.Parameter(torch.ones(1, 1, cfg.hidden_dim))
        self.base_grid = cfg.base_grid
        self._pos_cache = {}

    def interpolate_pos_encoding(self, h, w):
        key = (h, w)
        cached = self._pos_cache.get(key)
        if cached is not None:
            return cached
        dim = self.position_embeddings.shape[-1]
        grid = self.position_embeddings.reshape(1, self.base_grid, self.base_grid, dim).permute(0, 3, 1, 2)
        grid = F.interpolate(grid, size=(h, w), mode="bicubic", align_corners=False)
        pos = grid.permute(0, 2, 3, 1).reshape(1, h * w, dim)
        if not torch.is_grad_enabled():
            # memoise on the predict path; resolution rarely changes at test time
            self._pos_cache[key] = pos
        return pos

    def forward(self, pixel_values):
        b, _, H, W = pixel_values.shape
        h, w = H // self.patch_size, W // self.patch_size
        patches = self.patch_embeddings(pixel_values).flatten(2).transpose(1, 2)
        pos = self.interpolate_pos_encoding(h, w)
        embeddings = patches + pos * self.position_scale  # raises
        return torch.cat([self.cls_token.expand(b, -1, -1), embeddings], dim=1)


class Backbone(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embeddings = WindowedDinov2Embeddings(cfg)
        layer = nn.TransformerEncoderLayer(cfg.hidden_dim, nhead=4, dim_feedforward=64, batch_first=True, dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2)

    def forward(self, x):
        return self.encoder(self.embeddings(x))[:, 1:]


class MLP(nn.Module):
    def __init__(self, d_in, d_hidden, d_out, n_layers):
        super().__init__()
        dims = [d_in] + [d_hidden] * (n_layers - 1) + [d_out]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x) if i == len(self.layers) - 1 else F.relu(layer(x))
        return x


class DetrDetector(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.backbone = Backbone(cfg)
        self.query_feat = nn.Embedding(cfg.num_queries, cfg.hidden_dim)
        dec = nn.TransformerDecoderLayer(cfg.hidden_dim, nhead=4, dim_feedforward=64, batch_first=True, dropout=0.0)
        self.decoder = nn.TransformerDecoder(dec, num_layers=1)
        self.class_embed = nn.Linear(cfg.hidden_dim, 1)
        self.bbox_embed = MLP(cfg.hidden_dim, cfg.hidden_dim, 4, 2)

    def forward(self, images):
        memory = self.backbone(images)
        q = self.query_feat.weight.unsqueeze(0).expand(images.shape[0], -1, -1)
        hs = self.decoder(q, memory)
        return {"pred_logits": self.class_embed(hs).squeeze(-1), "pred_boxes": self.bbox_embed(hs).sigmoid()}


def box_iou(a, b):
    """IoU between cxcywh boxes a (N,4) and b (M,4)."""
    def to_xyxy(x):
        return torch.cat([x[:, :2] - x[:, 2:] / 2, x[:, :2] + x[:, 2:] / 2], dim=1)
    a, b = to_xyxy(a), to_xyxy(b)
    lt = torch.max(a[:, None, :2], b[None, :, :2])
    rb = torch.min(a[:, None, 2:], b[None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    area_a = (a[:, 2:] - a[:, :2]).prod(-1)
    area_b = (b[:, 2:] - b[:, :2]).prod(-1)
    return inter / (area_a[:, None] + area_b[None] - inter + 1e-6)


class IoUTracker:
    def __init__(self, iou_thresh):
        self.iou_thresh = iou_thresh
        self.tracks = {}
        self.next_id = 0

    def update(self, boxes, scores, score_thresh=0.3):
        boxes = boxes[scores > score_thresh]
        assigned = {}
        if self.tracks and len(boxes):
            ids = list(self.tracks)
            ious = box_iou(torch.stack([self.tracks[i] for i in ids]), boxes)
            for t_idx, d_idx in enumerate(ious.argmax(1).tolist()):
                if ious[t_idx, d_idx] > self.iou_thresh and d_idx not in assigned.values():
                    assigned[ids[t_idx]] = d_idx
        for tid, d_idx in assigned.items():
            self.tracks[tid] = boxes[d_idx]
        for d_idx in range(len(boxes)):
            if d_idx not in assigned.values():
                self.tracks[self.next_id] = boxes[d_idx]
                self.next_id += 1
        return dict(self.tracks)


def synthetic_clip(cfg, n_frames, g):
    """Squares drifting across the frame; targets are cxcywh in [0, 1]."""
    frames, targets = [], []
    start = torch.rand(cfg.num_objects, 2, generator=g) * 0.5 + 0.1
    vel = (torch.rand(cfg.num_objects, 2, generator=g) - 0.5) * 0.1
    for t in range(n_frames):
        img = 0.05 * torch.randn(3, cfg.image_size, cfg.image_size, generator=g)
        boxes = []
        for k in range(cfg.num_objects):
            c = (start[k] + vel[k] * t).clamp(0.15, 0.85)
            x0, y0 = int((c[0] - 0.1) * cfg.image_size), int((c[1] - 0.1) * cfg.image_size)
            s = int(0.2 * cfg.image_size)
            img[k % 3, y0:y0 + s, x0:x0 + s] += 1.0
            boxes.append(torch.tensor([c[0], c[1], 0.2, 0.2]))
        frames.append(img)
        targets.append(torch.stack(boxes))
    return torch.stack(frames), torch.stack(targets)


class TrackingRunner:
    def __init__(self, cfg):
        self.cfg = cfg
        self.model = DetrDetector(cfg)
        backbone = [p for n, p in self.model.named_parameters() if n.startswith("backbone")]
        head = [p for n, p in self.model.named_parameters() if not n.startswith("backbone")]
        self.optimizer = torch.optim.AdamW([{"params": head, "lr": cfg.lr},
                                            {"params": backbone, "lr": cfg.lr_backbone}], weight_decay=1e-4)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=2, gamma=0.5)
        self.history = []

    def compute_loss(self, outputs, targets):
        n = self.cfg.num_objects
        logits, boxes = outputs["pred_logits"], outputs["pred_boxes"]
        labels = torch.zeros_like(logits)
        labels[:, :n] = 1.0
        loss_cls = F.binary_cross_entropy_with_logits(logits, labels)
        loss_box = F.l1_loss(boxes[:, :n], targets)
        return loss_cls + 5.0 * loss_box

    def train_step(self, images, targets):
        self.model.train()
        outputs = self.model(images)
        loss = self.compute_loss(outputs, targets)
        self.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 0.1)
        self.optimizer.step()
        return loss.item()

    @torch.inference_mode()
    def track_sequence(self, frames):
        self.model.eval()
        tracker = IoUTracker(self.cfg.iou_thresh)
        n_tracks = 0
        for frame in frames:
            out = self.model(frame.unsqueeze(0))
            tracks = tracker.update(out["pred_boxes"][0], out["pred_logits"][0].sigmoid())
            n_tracks = len(tracks)
        return n_tracks

    def fit(self, train_clip, val_clip):
        frames, targets = train_clip
        for epoch in range(self.cfg.epochs):
            for step in range(self.cfg.steps_per_epoch):
                idx = torch.arange(step * 4, step * 4 + 4) % frames.shape[0]
                self.history.append(self.train_step(frames[idx], targets[idx]))
            self.scheduler.step()
            if (epoch + 1) % self.cfg.track_every == 0:
                n_tracks = self.track_sequence(val_clip[0])
                print("epoch %d  loss %.4f  tracks %d" % (epoch, self.history[-1], n_tracks))
        return self.history


def main():
    cfg = RunConfig()
    torch.manual_seed(cfg.seed)
    g = torch.Generator().manual_seed(cfg.seed)
    runner = TrackingRunner(cfg)
    history = runner.fit(synthetic_clip(cfg, 16, g), synthetic_clip(cfg, 6, g))
    print("final loss %.4f" % history[-1])


if __name__ == "__main__":
    main()
