# expect: clean
# source: https://github.com/Project-MONAI/MONAI/pull/8815
"""Fine-tuning loop for a small 3D-patch encoder with an embedding-collapse
monitor (MONAI-style EmbeddingCollapseMetric: centroid similarity, SVD
effective rank and a silhouette-based separation score) run from a
training callback every few iterations."""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_VALID_REDUCTIONS = ("max", "mean", "none")


# ---------------------------------------------------------------------------
# metric (tensor-in, tensor-out)
# ---------------------------------------------------------------------------
def _silhouette_score(x: np.ndarray, labels: np.ndarray) -> float:
    """Cosine silhouette, numpy port of sklearn.metrics.silhouette_score."""
    xn = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    dist = 1.0 - xn @ xn.T
    scores = []
    for i in range(x.shape[0]):
        same = labels == labels[i]
        same[i] = False
        if not same.any():
            scores.append(0.0)
            continue
        a = dist[i, same].mean()
        b = min(dist[i, labels == c].mean() for c in np.unique(labels) if c != labels[i])
        scores.append((b - a) / max(a, b, 1e-12))
    return float(np.mean(scores))


def _centroid_similarity(emb: torch.Tensor, labels: torch.Tensor) -> torch.Tensor | None:
    unique = torch.unique(labels)
    if unique.numel() < 2:
        return None
    centroids = []
    for cls in unique:
        c = emb[labels == cls].mean(dim=0)
        norm = c.norm(p=2)
        centroids.append(c / norm if norm > 0 else c)
    ct = torch.stack(centroids)
    sim = ct @ ct.T
    n = ct.shape[0]
    raw = torch.stack([sim[i, j] for i in range(n) for j in range(i + 1, n)]).mean()
    return ((raw + 1.0) / 2.0).clamp(0.0, 1.0)


def _effective_rank_score(emb: torch.Tensor) -> torch.Tensor:
    centered = emb - emb.mean(dim=0, keepdim=True)
    sv = torch.linalg.svdvals(centered)
    sv_sum = sv.sum()
    if sv_sum == 0:
        return emb.new_tensor(1.0)
    probs = sv / sv_sum
    safe_probs = probs.clamp_min(torch.finfo(probs.dtype).tiny)
    eff_rank = torch.exp(-(probs * safe_probs.log()).sum())
    max_rank = emb.new_tensor(float(min(emb.shape[0] - 1, emb.shape[1])))
    return (emb.new_tensor(1.0) - eff_rank / max_rank).clamp(0.0, 1.0)


def _separation(emb: torch.Tensor, labels: torch.Tensor) -> torch.Tensor | None:
    unique = torch.unique(labels)
    if unique.numel() < 2:
        return None
    try:
        sil = _silhouette_score(
            emb.detach().cpu().numpy(),
            labels.cpu().numpy(),
        )
    except ValueError as e:
        warnings.warn(f"silhouette failed: {e}")
        return None
    return torch.tensor((1.0 - float(sil)) / 2.0, dtype=emb.dtype, device=emb.device).clamp(0.0, 1.0)


def compute_embedding_collapse(embeddings: torch.Tensor, labels: torch.Tensor | None = None,
                               reduction: str = "max") -> dict[str, torch.Tensor | None]:
    if embeddings.ndim != 2 or embeddings.shape[0] < 2:
        raise ValueError(f"embeddings must be [N, D] with N >= 2, got {tuple(embeddings.shape)}")
    if reduction not in _VALID_REDUCTIONS:
        raise ValueError(f"reduction must be one of {_VALID_REDUCTIONS}, got '{reduction}'")
    emb = embeddings.float()
    scores: dict[str, torch.Tensor | None] = {}
    if labels is not None:
        lbl = labels.long()
        scores["centroid_similarity"] = _centroid_similarity(emb, lbl)
        scores["separation"] = _separation(emb, lbl)
    scores["effective_rank_score"] = _effective_rank_score(emb)
    if reduction != "none":
        available = [v for v in scores.values() if v is not None]
        stacked = torch.stack(available)
        scores["aggregate"] = stacked.max() if reduction == "max" else stacked.mean()
    return scores


class EmbeddingCollapseMetric:
    def __init__(self, reduction: str = "max", include_indicators: Sequence[str] | None = None) -> None:
        self.reduction = reduction
        self.include_indicators = include_indicators

    def __call__(self, embeddings: torch.Tensor, labels: torch.Tensor | None = None):
        return compute_embedding_collapse(embeddings, labels, reduction=self.reduction)


# ---------------------------------------------------------------------------
# model / trainer
# ---------------------------------------------------------------------------
@dataclass
class TrainConfig:
    in_channels: int = 1
    patch: int = 8
    embed_dim: int = 16
    num_classes: int = 3
    batch_size: int = 24
    iterations: int = 6
    lr: float = 1e-3
    monitor_every: int = 2
    history: list = field(default_factory=list)


class PatchEncoder(nn.Module):
    def __init__(self, cfg: TrainConfig):
        super().__init__()
        self.conv1 = nn.Conv3d(cfg.in_channels, 8, 3, padding=1)
        self.conv2 = nn.Conv3d(8, 16, 3, stride=2, padding=1)
        self.proj = nn.Linear(16, cfg.embed_dim)
        self.head = nn.Linear(cfg.embed_dim, cfg.num_classes)

    def embed(self, x):
        h = F.relu(self.conv1(x))
        h = F.relu(self.conv2(h))
        h = h.mean(dim=(2, 3, 4))
        return self.proj(h)

    def forward(self, x):
        z = self.embed(x)
        return self.head(z), z


class CollapseMonitorCallback:
    def __init__(self, every: int):
        self.every = every
        self.metric = EmbeddingCollapseMetric(reduction="max")

    def on_batch_end(self, trainer, step, embeddings, labels):
        if step % self.every:
            return
        scores = self.metric(embeddings, labels)
        logged = {k: round(float(v), 4) for k, v in scores.items() if v is not None}
        trainer.cfg.history.append((step, logged))
        print(f"[collapse] step={step} {logged}")


class Trainer:
    def __init__(self, cfg: TrainConfig, callbacks):
        self.cfg = cfg
        self.model = PatchEncoder(cfg)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=cfg.lr)
        self.callbacks = callbacks

    def synthetic_batch(self, g):
        y = torch.randint(0, self.cfg.num_classes, (self.cfg.batch_size,), generator=g)
        x = torch.randn(self.cfg.batch_size, self.cfg.in_channels, self.cfg.patch,
                        self.cfg.patch, self.cfg.patch, generator=g)
        x = x + y.view(-1, 1, 1, 1, 1).float() * 0.5
        return x, y

    def fit(self):
        g = torch.Generator().manual_seed(0)
        self.model.train()
        for step in range(self.cfg.iterations):
            x, y = self.synthetic_batch(g)
            logits, z = self.model(x)
            loss = F.cross_entropy(logits, y)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            for cb in self.callbacks:
                cb.on_batch_end(self, step, z, y)
        return self.cfg.history


def main():
    torch.manual_seed(0)
    cfg = TrainConfig()
    trainer = Trainer(cfg, [CollapseMonitorCallback(cfg.monitor_every)])
    history = trainer.fit()
    print("monitored steps:", [s for s, _ in history])


if __name__ == "__main__":
    main()
