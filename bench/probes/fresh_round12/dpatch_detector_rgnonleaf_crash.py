# expect: requires_grad_nonleaf
# source: https://github.com/Trusted-AI/adversarial-robustness-toolbox/issues/2248
"""DPatch attack against an ART-style PyTorchObjectDetector estimator. The
estimator wraps a small anchor-grid detector, applies PyTorch-specific
preprocessing (normalisation with mean/std) inside the graph, and exposes
loss_gradient() over a weighted set of attack losses; the DPatch attack then
optimises a square patch pasted into the top-left corner of the images."""
from dataclasses import dataclass, field
from typing import Dict, List, Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class AttackConfig:
    image_size: int = 32
    num_images: int = 2
    num_classes: int = 3
    patch_shape: Tuple[int, int, int] = (3, 8, 8)
    learning_rate: float = 5.0
    max_iter: int = 3
    batch_size: int = 2
    attack_losses: Tuple[str, ...] = ("loss_classifier", "loss_box_reg")
    mean: List[float] = field(default_factory=lambda: [0.485, 0.456, 0.406])
    std: List[float] = field(default_factory=lambda: [0.229, 0.224, 0.225])
    seed: int = 0


class GridDetector(nn.Module):
    """Predicts a class distribution and a box for every cell of a 4x4 grid."""

    def __init__(self, num_classes: int):
        super().__init__()
        self.num_classes = num_classes
        self.backbone = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4))
        self.cls_head = nn.Conv2d(32, num_classes + 1, 1)
        self.box_head = nn.Conv2d(32, 4, 1)

    def forward(self, images, targets=None):
        feats = self.backbone(images)
        cls_logits = self.cls_head(feats).flatten(2).transpose(1, 2)     # B x 16 x (C+1)
        boxes = self.box_head(feats).flatten(2).transpose(1, 2)          # B x 16 x 4
        if not self.training or targets is None:
            return [{"labels": c.argmax(-1), "boxes": b} for c, b in zip(cls_logits, boxes)]
        cls_t = torch.stack([t["cell_labels"] for t in targets])
        box_t = torch.stack([t["cell_boxes"] for t in targets])
        fg = cls_t > 0
        return {
            "loss_classifier": F.cross_entropy(cls_logits.reshape(-1, self.num_classes + 1), cls_t.reshape(-1)),
            "loss_box_reg": F.smooth_l1_loss(boxes[fg], box_t[fg]) if fg.any() else boxes.sum() * 0.0,
        }


class PyTorchObjectDetector:
    def __init__(self, model, clip_values, preprocessing, attack_losses, device="cpu"):
        self._model = model.to(device)
        self._device = torch.device(device)
        self.clip_values = clip_values
        self.preprocessing = preprocessing
        self.attack_losses = attack_losses
        self.all_framework_preprocessing = True

    def _apply_preprocessing(self, x: torch.Tensor, y, fit: bool = False):
        mean = torch.tensor(self.preprocessing[0], device=x.device).view(1, -1, 1, 1)
        std = torch.tensor(self.preprocessing[1], device=x.device).view(1, -1, 1, 1)
        return (x - mean) / std, y

    @staticmethod
    def _targets_to_cells(y: List[Dict[str, np.ndarray]], image_size: int):
        out = []
        cell = image_size / 4
        for y_i in y:
            labels = torch.zeros(16, dtype=torch.int64)
            boxes = torch.zeros(16, 4)
            for box, label in zip(y_i["boxes"], y_i["labels"]):
                cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
                idx = int(cy // cell) * 4 + int(cx // cell)
                labels[idx] = int(label) + 1
                boxes[idx] = torch.as_tensor(box, dtype=torch.float32) / image_size
            out.append({"cell_labels": labels, "cell_boxes": boxes})
        return out

    def _get_losses(self, x: np.ndarray, y):
        self._model.train()
        x_tensor = torch.from_numpy(x).to(self._device)
        if self.all_framework_preprocessing:
            x_tensor.requires_grad = True
        x_preprocessed, y_preprocessed = self._apply_preprocessing(x_tensor, y, fit=False)
        x_preprocessed.requires_grad = True  # raises
        targets = self._targets_to_cells(y_preprocessed, x.shape[-1])
        loss_components = self._model(x_preprocessed, targets)
        return loss_components, x_preprocessed, x_tensor

    def loss_gradient(self, x: np.ndarray, y) -> np.ndarray:
        loss_components, x_grad, x_input = self._get_losses(x=x, y=y)
        loss = sum(loss_components[name] for name in self.attack_losses)
        self._model.zero_grad()
        loss.backward(retain_graph=True)
        grads = x_input.grad if x_input.grad is not None else x_grad.grad
        return grads.cpu().numpy().copy()

    def predict(self, x: np.ndarray):
        self._model.eval()
        with torch.no_grad():
            x_t, _ = self._apply_preprocessing(torch.from_numpy(x), None)
            preds = self._model(x_t)
        return [{k: v.numpy() for k, v in p.items()} for p in preds]


class DPatch:
    def __init__(self, estimator: PyTorchObjectDetector, cfg: AttackConfig):
        self.estimator = estimator
        self.cfg = cfg
        lo, hi = estimator.clip_values
        self._patch = np.ones(cfg.patch_shape, dtype=np.float32) * (hi + lo) / 2.0

    def apply_patch(self, x: np.ndarray) -> np.ndarray:
        x = x.copy()
        c, h, w = self.cfg.patch_shape
        x[:, :c, :h, :w] = self._patch
        return x

    def generate(self, x: np.ndarray, y) -> np.ndarray:
        for i_step in range(self.cfg.max_iter):
            patched = self.apply_patch(x)
            grads = self.estimator.loss_gradient(patched, y)
            c, h, w = self.cfg.patch_shape
            patch_grad = grads[:, :c, :h, :w].sum(axis=0)
            self._patch = self._patch + np.sign(patch_grad) * self.cfg.learning_rate / 255.0
            self._patch = np.clip(self._patch, *self.estimator.clip_values).astype(np.float32)
            print(f"DPatch iteration {i_step + 1}/{self.cfg.max_iter}, patch mean={self._patch.mean():.4f}")
        return self._patch


def main():
    cfg = AttackConfig()
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    detector = PyTorchObjectDetector(GridDetector(cfg.num_classes), clip_values=(0.0, 1.0),
                                     preprocessing=(cfg.mean, cfg.std), attack_losses=cfg.attack_losses)
    images = rng.random((cfg.num_images, 3, cfg.image_size, cfg.image_size)).astype(np.float32)
    labels = [{"boxes": np.array([[12.0, 12.0, 24.0, 24.0]], dtype=np.float32),
               "labels": np.array([rng.integers(cfg.num_classes)])} for _ in range(cfg.num_images)]
    attack = DPatch(detector, cfg)
    patch = attack.generate(images, labels)
    preds = detector.predict(attack.apply_patch(images))
    print("patch", patch.shape, "first-image labels", preds[0]["labels"][:4])


if __name__ == "__main__":
    main()
