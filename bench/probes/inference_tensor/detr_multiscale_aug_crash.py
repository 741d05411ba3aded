# expect: inference_tensor
# source: https://github.com/roboflow/rf-detr/issues/297
import math
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


@dataclass
class TrainConfig:
    resolution: int = 64
    patch_size: int = 8
    multi_scale: bool = True
    expanded_scales: bool = False
    do_random_resize_via_padding: bool = False
    num_classes: int = 4
    num_queries: int = 12
    hidden_dim: int = 32
    epochs: int = 2
    batch_size: int = 4
    grad_accum_steps: int = 2
    lr: float = 1e-4
    weight_decay: float = 1e-4
    clip_max_norm: float = 0.1
    seed: int = 0


class NestedTensor:
    def __init__(self, tensors, mask):
        self.tensors = tensors
        self.mask = mask


def compute_multi_scale_scales(resolution, expanded_scales=False, patch_size=8):
    base_num_patches = resolution // patch_size
    offsets = [-2, -1, 0, 1, 2] if expanded_scales else [-1, 0, 1]
    return [(base_num_patches + o) * patch_size for o in offsets if base_num_patches + o > 0]


class SyntheticCocoDetection(Dataset):
    def __init__(self, n, cfg):
        g = torch.Generator().manual_seed(cfg.seed)
        self.images = torch.rand(n, 3, cfg.resolution, cfg.resolution, generator=g)
        self.targets = []
        for _ in range(n):
            k = int(torch.randint(1, 4, (1,), generator=g))
            boxes = torch.rand(k, 4, generator=g) * 0.5 + 0.25
            labels = torch.randint(0, cfg.num_classes, (k,), generator=g)
            self.targets.append({"boxes": boxes, "labels": labels})

    def __len__(self):
        return len(self.images)

    def __getitem__(self, idx):
        return self.images[idx], self.targets[idx]


def collate_fn(batch):
    images = torch.stack([b[0] for b in batch])
    mask = torch.zeros(images.shape[0], images.shape[2], images.shape[3], dtype=torch.bool)
    return NestedTensor(images, mask), [b[1] for b in batch]


class Backbone(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, cfg.hidden_dim, kernel_size=cfg.patch_size, stride=cfg.patch_size), nn.GELU())
        self.block = nn.Sequential(nn.Conv2d(cfg.hidden_dim, cfg.hidden_dim, 3, padding=1), nn.GELU())

    def forward(self, samples):
        x = self.stem(samples.tensors)  # raises
        x = x + self.block(x)
        mask = F.interpolate(samples.mask[None].float(), size=x.shape[-2:]).to(torch.bool)[0]
        return x, mask


class LWDETR(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.backbone = Backbone(cfg)
        self.query_embed = nn.Embedding(cfg.num_queries, cfg.hidden_dim)
        self.cross_attn = nn.MultiheadAttention(cfg.hidden_dim, num_heads=4, batch_first=True)
        self.class_embed = nn.Linear(cfg.hidden_dim, cfg.num_classes + 1)
        self.bbox_embed = nn.Sequential(nn.Linear(cfg.hidden_dim, cfg.hidden_dim), nn.ReLU(), nn.Linear(cfg.hidden_dim, 4))

    def forward(self, samples, targets=None):
        features, mask = self.backbone(samples)
        memory = features.flatten(2).transpose(1, 2)
        queries = self.query_embed.weight.unsqueeze(0).expand(memory.shape[0], -1, -1)
        hs, _ = self.cross_attn(queries, memory, memory, key_padding_mask=mask.flatten(1))
        return {"pred_logits": self.class_embed(hs), "pred_boxes": self.bbox_embed(hs).sigmoid()}


class SetCriterion(nn.Module):
    def __init__(self, num_classes, eos_coef=0.1):
        super().__init__()
        self.num_classes = num_classes
        weight = torch.ones(num_classes + 1)
        weight[-1] = eos_coef
        self.register_buffer("empty_weight", weight)

    def forward(self, outputs, targets):
        logits, boxes = outputs["pred_logits"], outputs["pred_boxes"]
        target_classes = torch.full(logits.shape[:2], self.num_classes, dtype=torch.long)
        loss_bbox = logits.new_zeros(())
        for i, t in enumerate(targets):
            n = len(t["labels"])
            target_classes[i, :n] = t["labels"]
            loss_bbox = loss_bbox + F.l1_loss(boxes[i, :n], t["boxes"], reduction="sum")
        loss_ce = F.cross_entropy(logits.transpose(1, 2), target_classes, self.empty_weight)
        num_boxes = max(sum(len(t["labels"]) for t in targets), 1)
        return {"loss_ce": loss_ce, "loss_bbox": loss_bbox / num_boxes}


def train_one_epoch(model, criterion, data_loader, optimizer, epoch, args):
    model.train()
    criterion.train()
    optimizer.zero_grad()
    for it, (samples, targets) in enumerate(data_loader):
        if args.multi_scale and not args.do_random_resize_via_padding:
            scales = compute_multi_scale_scales(args.resolution, args.expanded_scales, args.patch_size)
            random.seed(it)
            scale = random.choice(scales)
            with torch.inference_mode():
                samples.tensors = F.interpolate(samples.tensors, size=scale, mode="bilinear", align_corners=False)
                samples.mask = F.interpolate(samples.mask.unsqueeze(1).float(), size=scale, mode="nearest").squeeze(1).bool()

        outputs = model(samples, targets)
        loss_dict = criterion(outputs, targets)
        losses = (loss_dict["loss_ce"] + 5.0 * loss_dict["loss_bbox"]) / args.grad_accum_steps
        if not math.isfinite(losses.item()):
            raise RuntimeError(f"Loss is {losses.item()}, stopping training")
        losses.backward()
        if (it + 1) % args.grad_accum_steps == 0:
            if args.clip_max_norm > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_max_norm)
            optimizer.step()
            optimizer.zero_grad()
    return {"loss": losses.item() * args.grad_accum_steps}


def evaluate(model, criterion, data_loader):
    model.eval()
    total, count = 0.0, 0
    with torch.inference_mode():
        for samples, targets in data_loader:
            outputs = model(samples)
            loss_dict = criterion(outputs, targets)
            total += float(loss_dict["loss_ce"] + loss_dict["loss_bbox"])
            count += 1
    return {"val_loss": total / max(count, 1)}


def main(args):
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    model = LWDETR(args)
    criterion = SetCriterion(args.num_classes)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    train_loader = DataLoader(SyntheticCocoDetection(16, args), batch_size=args.batch_size, shuffle=True, collate_fn=collate_fn)
    val_loader = DataLoader(SyntheticCocoDetection(8, args), batch_size=args.batch_size, collate_fn=collate_fn)
    for epoch in range(args.epochs):
        train_stats = train_one_epoch(model, criterion, train_loader, optimizer, epoch, args)
        test_stats = evaluate(model, criterion, val_loader)
        print(f"epoch {epoch}: train {train_stats['loss']:.4f} val {test_stats['val_loss']:.4f}")


if __name__ == "__main__":
    main(TrainConfig())
