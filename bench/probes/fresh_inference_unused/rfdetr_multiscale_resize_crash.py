# expect: inference_tensor
# source: https://github.com/roboflow/rf-detr/issues/297
import math
import random
from collections import defaultdict
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.amp import autocast, GradScaler


class NestedTensor(object):
    def __init__(self, tensors, mask):
        self.tensors = tensors
        self.mask = mask

    def to(self, device, **kwargs):
        cast_tensor = self.tensors.to(device, **kwargs)
        cast_mask = self.mask.to(device, **kwargs) if self.mask is not None else None
        return NestedTensor(cast_tensor, cast_mask)

    def decompose(self):
        return self.tensors, self.mask


def compute_multi_scale_scales(resolution, expanded_scales=False, patch_size=16, num_windows=4):
    base_num_patches_per_window = resolution // (patch_size * num_windows)
    offsets = [-3, -2, -1, 0, 1, 2, 3, 4] if not expanded_scales else [-5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5]
    scales = [base_num_patches_per_window + offset for offset in offsets]
    proposed_scales = [scale * patch_size * num_windows for scale in scales]
    return [scale for scale in proposed_scales if scale >= patch_size * num_windows * 2]


class Backbone(nn.Module):
    def __init__(self, hidden_dim=32, patch_size=16):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(3, hidden_dim, kernel_size=patch_size, stride=patch_size),
            nn.GELU(),
            nn.Conv2d(hidden_dim, hidden_dim, kernel_size=3, padding=1),
        )

    def forward(self, tensor_list: NestedTensor):
        feats = self.encoder(tensor_list.tensors)  # raises
        mask = F.interpolate(tensor_list.mask[None].float(), size=feats.shape[-2:]).to(torch.bool)[0]
        not_mask = ~mask
        y_embed = not_mask.cumsum(1, dtype=torch.float32)
        x_embed = not_mask.cumsum(2, dtype=torch.float32)
        pos = torch.stack([y_embed / y_embed[:, -1:, :].clamp(min=1), x_embed / x_embed[:, :, -1:].clamp(min=1)], 1)
        return feats, pos


class LWDETR(nn.Module):
    def __init__(self, num_classes=3, num_queries=10, hidden_dim=32):
        super().__init__()
        self.backbone = Backbone(hidden_dim)
        self.pos_proj = nn.Conv2d(2, hidden_dim, 1)
        self.query_embed = nn.Embedding(num_queries, hidden_dim)
        self.decoder = nn.MultiheadAttention(hidden_dim, 4, batch_first=True)
        self.class_embed = nn.Linear(hidden_dim, num_classes + 1)
        self.bbox_embed = nn.Linear(hidden_dim, 4)
        self.drop_path = 0.0

    def update_drop_path(self, drop_path_rate, vit_encoder_num_layers):
        self.drop_path = drop_path_rate

    def forward(self, samples: NestedTensor, targets=None):
        features, poss = self.backbone(samples)
        memory = (features + self.pos_proj(poss)).flatten(2).transpose(1, 2)
        tgt = self.query_embed.weight.unsqueeze(0).expand(memory.shape[0], -1, -1)
        hs = self.decoder(tgt, memory, memory, need_weights=False)[0]
        return {"pred_logits": self.class_embed(hs), "pred_boxes": self.bbox_embed(hs).sigmoid()}


class SetCriterion(nn.Module):
    def __init__(self, num_classes, weight_dict):
        super().__init__()
        self.num_classes = num_classes
        self.weight_dict = weight_dict

    def forward(self, outputs, targets):
        logits, boxes = outputs["pred_logits"], outputs["pred_boxes"]
        target_classes = torch.full(logits.shape[:2], self.num_classes, dtype=torch.long)
        loss_bbox = logits.new_zeros(())
        for b, t in enumerate(targets):
            n = len(t["labels"])
            target_classes[b, :n] = t["labels"]
            loss_bbox = loss_bbox + F.l1_loss(boxes[b, :n], t["boxes"], reduction="sum")
        loss_ce = F.cross_entropy(logits.transpose(1, 2), target_classes)
        num_boxes = max(sum(len(t["labels"]) for t in targets), 1)
        acc = (logits.argmax(-1) == target_classes).float().mean() * 100
        return {"loss_ce": loss_ce, "loss_bbox": loss_bbox / num_boxes, "class_error": 100 - acc.detach()}


def get_autocast_args(args):
    return {'device_type': 'cpu', 'enabled': args.amp, 'dtype': torch.bfloat16}


def train_one_epoch(model, criterion, lr_scheduler, data_loader, optimizer, device, epoch, batch_size,
                    max_norm=0, ema_m=None, schedules={}, num_training_steps_per_epoch=None,
                    vit_encoder_num_layers=None, args=None, callbacks=None):
    start_steps = epoch * num_training_steps_per_epoch
    print("Grad accum steps: ", args.grad_accum_steps)
    scaler = GradScaler('cpu', enabled=args.amp)

    optimizer.zero_grad()
    assert batch_size % args.grad_accum_steps == 0
    sub_batch_size = batch_size // args.grad_accum_steps
    for data_iter_step, (samples, targets) in enumerate(data_loader):
        it = start_steps + data_iter_step
        callback_dict = {"step": it, "model": model, "epoch": epoch}
        for callback in callbacks["on_train_batch_start"]:
            callback(callback_dict)
        if "dp" in schedules:
            model.update_drop_path(schedules["dp"][it], vit_encoder_num_layers)

        if args.multi_scale and not args.do_random_resize_via_padding:
            scales = compute_multi_scale_scales(args.resolution, args.expanded_scales, args.patch_size, args.num_windows)
            random.seed(it)
            scale = random.choice(scales)
            with torch.inference_mode():
                samples.tensors = F.interpolate(samples.tensors, size=scale, mode='bilinear', align_corners=False)
                samples.mask = F.interpolate(samples.mask.unsqueeze(1).float(), size=scale, mode='nearest').squeeze(1).bool()

        for i in range(args.grad_accum_steps):
            start_idx = i * sub_batch_size
            final_idx = start_idx + sub_batch_size
            new_samples_tensors = samples.tensors[start_idx:final_idx]
            new_samples = NestedTensor(new_samples_tensors, samples.mask[start_idx:final_idx])
            new_samples = new_samples.to(device)
            new_targets = [{k: v.to(device) for k, v in t.items()} for t in targets[start_idx:final_idx]]

            with autocast(**get_autocast_args(args)):
                outputs = model(new_samples, new_targets)
                loss_dict = criterion(outputs, new_targets)
                weight_dict = criterion.weight_dict
                losses = sum(
                    (1 / args.grad_accum_steps) * loss_dict[k] * weight_dict[k]
                    for k in loss_dict.keys()
                    if k in weight_dict
                )
            scaler.scale(losses).backward()

        loss_value = sum(loss_dict[k].item() * weight_dict[k] for k in loss_dict if k in weight_dict)
        if not math.isfinite(loss_value):
            raise ValueError("Loss is {}, stopping training".format(loss_value))
        if max_norm > 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
        lr_scheduler.step()
        optimizer.zero_grad()
        print(f"Epoch: [{epoch}] it {it} loss {loss_value:.4f} class_error {loss_dict['class_error'].item():.2f}")
    return {"loss": loss_value}


class SyntheticDetectionLoader:
    def __init__(self, num_batches, batch_size, resolution, num_classes, seed=0):
        self.num_batches, self.batch_size = num_batches, batch_size
        self.resolution, self.num_classes = resolution, num_classes
        self.g = torch.Generator().manual_seed(seed)

    def __len__(self):
        return self.num_batches

    def __iter__(self):
        for _ in range(self.num_batches):
            images = torch.randn(self.batch_size, 3, self.resolution, self.resolution, generator=self.g)
            mask = torch.zeros(self.batch_size, self.resolution, self.resolution, dtype=torch.bool)
            targets = []
            for _ in range(self.batch_size):
                n = int(torch.randint(1, 4, (1,), generator=self.g))
                targets.append({"labels": torch.randint(0, self.num_classes, (n,), generator=self.g),
                                "boxes": torch.rand(n, 4, generator=self.g)})
            yield NestedTensor(images, mask), targets


def main():
    torch.manual_seed(42)
    args = SimpleNamespace(resolution=128, patch_size=16, num_windows=2, multi_scale=True, expanded_scales=False,
                           do_random_resize_via_padding=False, grad_accum_steps=2, batch_size=4, amp=False,
                           lr=1e-4, weight_decay=1e-4, epochs=2, clip_max_norm=0.1, num_classes=3)
    device = torch.device("cpu")
    model = LWDETR(num_classes=args.num_classes).to(device)
    criterion = SetCriterion(args.num_classes, weight_dict={"loss_ce": 1.0, "loss_bbox": 5.0})
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    data_loader_train = SyntheticDetectionLoader(3, args.batch_size, args.resolution, args.num_classes)
    lr_scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=100)
    callbacks = defaultdict(list)
    for epoch in range(args.epochs):
        train_stats = train_one_epoch(
            model, criterion, lr_scheduler, data_loader_train, optimizer, device, epoch, args.batch_size,
            args.clip_max_norm, num_training_steps_per_epoch=len(data_loader_train), args=args,
            callbacks=callbacks)
        print("train stats:", train_stats)


if __name__ == "__main__":
    main()
