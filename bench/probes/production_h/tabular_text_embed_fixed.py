# expect: clean
# source: https://github.com/pyg-team/pytorch-frame/pull/229
"""Multi-modal tabular classification (numerical + categorical + text
columns).  A dataset is materialised once into a column-typed tensor frame
(text columns pre-encoded by a light-weight text embedder), and a small
FT-Transformer-style model is trained on mini-batches of that frame."""
import time
import zlib
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)

NUMERICAL, CATEGORICAL, TEXT = "numerical", "categorical", "text_embedded"


class HashTextEmbedder:
    def __init__(self, out_channels: int, num_hash_bins: int = 64, device: Optional[torch.device] = None):
        self.out_channels = out_channels
        self.num_hash_bins = num_hash_bins
        self.device = device
        self.embedding = nn.Embedding(num_hash_bins, out_channels).to(device)

    def __call__(self, sentences: List[str]) -> torch.Tensor:
        idx = torch.LongTensor([zlib.crc32(s.encode()) % self.num_hash_bins for s in sentences])
        return self.embedding(idx).detach()


@dataclass
class TextEmbedderConfig:
    text_embedder: Callable[[List[str]], torch.Tensor]
    batch_size: Optional[int] = None


@dataclass
class TensorFrame:
    feat_dict: Dict[str, torch.Tensor]
    y: torch.Tensor
    col_names: Dict[str, List[str]] = field(default_factory=dict)

    def __len__(self):
        return self.y.shape[0]

    def __getitem__(self, idx):
        return TensorFrame({k: v[idx] for k, v in self.feat_dict.items()}, self.y[idx], self.col_names)


class TabularDataset:
    def __init__(self, df: Dict[str, list], col_to_stype: Dict[str, str], target_col: str):
        self.df, self.col_to_stype, self.target_col = df, col_to_stype, target_col
        self.tensor_frame = None
        self.col_stats = {}

    def _encode_text(self, values, cfg: TextEmbedderConfig):
        bs = cfg.batch_size or len(values)
        chunks = [cfg.text_embedder(values[i:i + bs]) for i in range(0, len(values), bs)]
        return torch.cat(chunks, 0)

    def materialize(self, col_to_text_embedder_cfg: Optional[Dict[str, TextEmbedderConfig]] = None):
        feats = {NUMERICAL: [], CATEGORICAL: [], TEXT: []}
        names = {NUMERICAL: [], CATEGORICAL: [], TEXT: []}
        for col, stype in self.col_to_stype.items():
            if col == self.target_col:
                continue
            values = self.df[col]
            if stype == NUMERICAL:
                arr = torch.tensor(values, dtype=torch.float32)
                arr = torch.nan_to_num(arr, nan=arr.nanmean().item())
                self.col_stats[col] = {"mean": arr.mean().item(), "std": arr.std().item() + 1e-6}
                feats[NUMERICAL].append(arr.unsqueeze(1))
            elif stype == CATEGORICAL:
                cats = sorted(set(values))
                self.col_stats[col] = {"count": len(cats)}
                feats[CATEGORICAL].append(torch.tensor([cats.index(v) for v in values]).unsqueeze(1))
            elif stype == TEXT:
                emb = self._encode_text(values, col_to_text_embedder_cfg[col])
                self.col_stats[col] = {"dim": emb.shape[1]}
                feats[TEXT].append(emb.unsqueeze(1))
            names[stype].append(col)
        feat_dict = {k: torch.cat(v, 1) for k, v in feats.items() if v}
        y = torch.tensor(self.df[self.target_col])
        self.tensor_frame = TensorFrame(feat_dict, y, names)
        return self


class StypeWiseEncoder(nn.Module):
    def __init__(self, channels, col_stats, col_names):
        super().__init__()
        self.col_names = col_names
        num_cols = col_names[NUMERICAL]
        self.register_buffer("mean", torch.tensor([col_stats[c]["mean"] for c in num_cols]))
        self.register_buffer("std", torch.tensor([col_stats[c]["std"] for c in num_cols]))
        self.num_weight = nn.Parameter(torch.randn(len(num_cols), channels) * 0.1)
        self.num_bias = nn.Parameter(torch.zeros(len(num_cols), channels))
        self.cat_embs = nn.ModuleList([nn.Embedding(col_stats[c]["count"], channels) for c in col_names[CATEGORICAL]])
        self.text_proj = nn.ModuleList([nn.Linear(col_stats[c]["dim"], channels) for c in col_names[TEXT]])

    def forward(self, tf: TensorFrame):
        xs = []
        xn = (tf.feat_dict[NUMERICAL] - self.mean) / self.std
        xs.append(xn.unsqueeze(-1) * self.num_weight + self.num_bias)
        xs.append(torch.stack([emb(tf.feat_dict[CATEGORICAL][:, i]) for i, emb in enumerate(self.cat_embs)], 1))
        xs.append(torch.stack([lin(tf.feat_dict[TEXT][:, i]) for i, lin in enumerate(self.text_proj)], 1))
        return torch.cat(xs, 1)


class FTTransformer(nn.Module):
    def __init__(self, channels, out_channels, num_layers, col_stats, col_names):
        super().__init__()
        self.encoder = StypeWiseEncoder(channels, col_stats, col_names)
        self.cls = nn.Parameter(torch.zeros(1, 1, channels))
        layer = nn.TransformerEncoderLayer(channels, nhead=4, dim_feedforward=2 * channels, dropout=0.1,
                                           batch_first=True)
        self.backbone = nn.TransformerEncoder(layer, num_layers=num_layers)
        self.decoder = nn.Sequential(nn.LayerNorm(channels), nn.ReLU(), nn.Linear(channels, out_channels))

    def forward(self, tf):
        x = self.encoder(tf)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1)
        return self.decoder(self.backbone(x)[:, 0])


def make_frame(n, rng):
    titles = ["senior data engineer", "junior analyst", "ml researcher", "ops manager", "sales associate",
              "staff software engineer", "intern", "product designer"]
    blurbs = ["remote friendly", "on site only", "fast growing startup", "large enterprise", "flexible hours"]
    df = {"years": [], "salary_k": [], "city": [], "title": [], "blurb": [], "label": []}
    for _ in range(n):
        t = int(rng.integers(len(titles)))
        years = float(rng.integers(0, 15))
        df["years"].append(years if rng.random() > 0.05 else float("nan"))
        df["salary_k"].append(40 + 8 * years + 5 * t + float(rng.normal(0, 5)))
        df["city"].append(["sf", "nyc", "berlin", "remote"][int(rng.integers(4))])
        df["title"].append(titles[t])
        df["blurb"].append(blurbs[int(rng.integers(len(blurbs)))])
        df["label"].append(int(("engineer" in titles[t] or "research" in titles[t]) and years > 3))
    return df


def main():
    rng = np.random.default_rng(0)
    col_to_stype = {"years": NUMERICAL, "salary_k": NUMERICAL, "city": CATEGORICAL, "title": TEXT,
                    "blurb": TEXT, "label": CATEGORICAL}
    embedder = HashTextEmbedder(out_channels=16, num_hash_bins=32)
    text_cfg = {c: TextEmbedderConfig(text_embedder=embedder, batch_size=64) for c in ("title", "blurb")}
    ds = TabularDataset(make_frame(512, rng), col_to_stype, target_col="label").materialize(text_cfg)
    tf = ds.tensor_frame
    perm = torch.randperm(len(tf))
    train_tf, val_tf = tf[perm[:400]], tf[perm[400:]]
    model = FTTransformer(32, 2, 2, ds.col_stats, tf.col_names)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=3 * 7)
    t0 = time.time()
    for epoch in range(3):
        model.train()
        order = torch.randperm(len(train_tf))
        total, count = 0.0, 0
        for i in range(0, len(train_tf), 64):
            batch = train_tf[order[i:i + 64]]
            loss = F.cross_entropy(model(batch), batch.y)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            total, count = total + loss.item() * len(batch), count + len(batch)
        model.eval()
        with torch.no_grad():
            acc = (model(val_tf).argmax(-1) == val_tf.y).float().mean().item()
        print(f"epoch {epoch} train loss {total / count:.4f} val acc {acc:.3f} ({time.time() - t0:.1f}s)")


if __name__ == "__main__":
    main()
