# expect: numpy_requires_grad
# source: https://github.com/zyddnys/manga-image-translator/issues/179
"""Comic text detector (manga-image-translator style) fine-tuned on synthetic pages.

A small TextDetBase model (conv backbone, text-mask segmentation head and a DB-style
text-line head) is fine-tuned on synthetic comic pages with drawn speech-bubble text
regions.  After every epoch the offline detector wrapper (`ComicTextDetector`, with
the async `_load`/`_forward` interface of the translator's detectors) runs the full
detection pipeline on validation pages: letterbox / rearrange into batches, batched
forward, mask post-processing and box extraction, and the Runner reports box recall.
Synthetic data, CPU only.
"""
import asyncio
import math
import random
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def set_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


CFG = SimpleNamespace(
    seed=7,
    input_size=64,
    det_rearrange_max_batches=4,
    epochs=2,
    steps_per_epoch=6,
    batch_size=4,
    lr=2e-3,
    text_threshold=0.5,
    box_threshold=0.6,
    num_val_pages=3,
)


# ----------------------------------------------------------------------------- data
def make_page(h, w, rng):
    """A grey page with 1-3 bright rectangles standing in for text blocks."""
    page = rng.uniform(0.0, 0.3, size=(h, w, 3)).astype(np.float32)
    mask = np.zeros((h, w), dtype=np.float32)
    boxes = []
    for _ in range(rng.integers(1, 4)):
        bh, bw = rng.integers(6, h // 3), rng.integers(6, w // 3)
        y0, x0 = rng.integers(0, h - bh), rng.integers(0, w - bw)
        page[y0:y0 + bh, x0:x0 + bw] = rng.uniform(0.7, 1.0)
        mask[y0:y0 + bh, x0:x0 + bw] = 1.0
        boxes.append((x0, y0, x0 + bw, y0 + bh))
    return (page * 255).astype(np.uint8), mask, boxes


def train_batches(cfg, rng):
    for _ in range(cfg.steps_per_epoch):
        imgs, masks = [], []
        for _ in range(cfg.batch_size):
            page, mask, _ = make_page(cfg.input_size, cfg.input_size, rng)
            imgs.append(page)
            masks.append(mask)
        x = torch.from_numpy(np.stack(imgs).astype(np.float32) / 255.).permute(0, 3, 1, 2)
        y = torch.from_numpy(np.stack(masks))[:, None]
        yield x, y


# ---------------------------------------------------------------------------- model
class ConvBNAct(nn.Sequential):
    def __init__(self, cin, cout, stride=1):
        super().__init__(nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
                         nn.BatchNorm2d(cout), nn.LeakyReLU(0.1))


class TextDetBase(nn.Module):
    """Backbone + segmentation head (text mask) + DB head (text lines)."""

    def __init__(self, width=16):
        super().__init__()
        self.backbone = nn.Sequential(ConvBNAct(3, width), ConvBNAct(width, width * 2, 2),
                                      ConvBNAct(width * 2, width * 2))
        self.seg_head = nn.Sequential(ConvBNAct(width * 2, width), nn.Conv2d(width, 1, 1))
        self.db_head = nn.Sequential(ConvBNAct(width * 2, width), nn.Conv2d(width, 2, 1))

    def forward(self, x):
        feat = self.backbone(x)
        mask = torch.sigmoid(F.interpolate(self.seg_head(feat), size=x.shape[-2:],
                                           mode='bilinear', align_corners=False))
        lines = torch.sigmoid(F.interpolate(self.db_head(feat), size=x.shape[-2:],
                                            mode='bilinear', align_corners=False))
        return feat, mask, lines


# ------------------------------------------------------------------ detection utils
def det_rearrange_forward(img, dbnet_batch_forward, tgt_size, max_batch_size, device, verbose=False):
    """Split a tall page into square patches, run them in batches, stitch the outputs."""
    h, w = img.shape[:2]
    n_patch = max(1, math.ceil(h / tgt_size))
    patches = []
    for i in range(n_patch):
        crop = img[i * tgt_size:(i + 1) * tgt_size]
        pad = np.zeros((tgt_size, w, 3), dtype=img.dtype)
        pad[:crop.shape[0]] = crop
        patches.append(pad[:, :tgt_size])
    lines_lst, mask_lst = [], []
    for s in range(0, len(patches), max_batch_size):
        batch = np.stack(patches[s:s + max_batch_size])
        lines, mask = dbnet_batch_forward(batch, device)
        lines_lst.append(lines)
        mask_lst.append(mask)
    lines = np.concatenate(lines_lst, 0)
    mask = np.concatenate(mask_lst, 0)
    lines = np.concatenate(list(lines), axis=1)[:, :h]
    mask = np.concatenate(list(mask), axis=1)[:, :h]
    return lines, mask


def postprocess_mask(mask, thresh):
    return ((mask.squeeze() > thresh) * 255).astype(np.uint8)


def boxes_from_lines(lines_map, thresh):
    prob = lines_map[0]
    ys, xs = np.where(prob > thresh)
    if len(ys) == 0:
        return []
    return [(int(xs.min()), int(ys.min()), int(xs.max()), int(ys.max()))]


class OfflineDetector:
    async def load(self, device, *args, **kwargs):
        await self._load(device, *args, **kwargs)

    async def detect(self, image, **kwargs):
        return await self._forward(image, **kwargs)


class ComicTextDetector(OfflineDetector):
    def __init__(self, model):
        self.model = model

    async def _load(self, device, input_size=64, half=False):
        self.device = device
        self.input_size = (input_size, input_size)
        self.half = half

    def det_batch_forward_ctd(self, batch, device):
        batch = torch.from_numpy(batch.astype(np.float32) / 255.).permute(0, 3, 1, 2).to(device)
        _, mask, lines = self.model(batch)
        mask = mask.cpu().numpy()  # raises
        lines = lines.cpu().numpy()
        return lines, mask

    @torch.no_grad()
    async def _forward(self, image, text_threshold=0.5, box_threshold=0.6, det_rearrange_max_batches=4):
        lines_map, mask = det_rearrange_forward(image, self.det_batch_forward_ctd, self.input_size[0],
                                                det_rearrange_max_batches, self.device)
        mask = postprocess_mask(mask, text_threshold)
        boxes = boxes_from_lines(lines_map, box_threshold)
        return boxes, mask


# --------------------------------------------------------------------------- runner
def dice_loss(pred, target, eps=1e-6):
    inter = (pred * target).sum((1, 2, 3))
    return 1 - ((2 * inter + eps) / (pred.sum((1, 2, 3)) + target.sum((1, 2, 3)) + eps)).mean()


class Runner:
    def __init__(self, cfg):
        self.cfg = cfg
        self.rng = np.random.default_rng(cfg.seed)
        self.model = TextDetBase()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr, weight_decay=1e-4)
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
            self.optimizer, T_max=cfg.epochs * cfg.steps_per_epoch)
        self.detector = ComicTextDetector(self.model)
        asyncio.run(self.detector.load('cpu', input_size=cfg.input_size))
        self.history = []

    def train_step(self, x, y):
        self.model.train()
        _, mask, lines = self.model(x)
        loss = F.binary_cross_entropy(mask, y) + dice_loss(mask, y) + 0.5 * F.binary_cross_entropy(lines[:, :1], y)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        return loss.item()

    def evaluate(self):
        self.model.eval()
        hits, total = 0, 0
        for _ in range(self.cfg.num_val_pages):
            page, _, gt_boxes = make_page(self.cfg.input_size * 2, self.cfg.input_size, self.rng)
            boxes, _ = asyncio.run(self.detector.detect(
                page, text_threshold=self.cfg.text_threshold, box_threshold=self.cfg.box_threshold,
                det_rearrange_max_batches=self.cfg.det_rearrange_max_batches))
            total += len(gt_boxes)
            hits += min(len(boxes), len(gt_boxes))
        return hits / max(total, 1)

    def fit(self):
        for epoch in range(self.cfg.epochs):
            losses = [self.train_step(x, y) for x, y in train_batches(self.cfg, self.rng)]
            recall = self.evaluate()
            self.history.append((epoch, float(np.mean(losses)), recall))
            print(f"epoch {epoch}: loss {np.mean(losses):.4f} box recall {recall:.3f}")


def main():
    set_seed(CFG.seed)
    Runner(CFG).fit()


if __name__ == '__main__':
    main()
