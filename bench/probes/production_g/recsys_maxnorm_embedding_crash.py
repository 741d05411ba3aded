# expect: inplace_version
# source: https://github.com/pytorch/pytorch/issues/26596
"""Next-item recommendation with a two-tower model and full-catalog softmax.

Item embeddings are norm-constrained (nn.Embedding(max_norm=...)) so that the
dot-product scores stay bounded.  The user tower pools the embeddings of the
recent interaction history; the item tower projects the whole catalog once
per batch for a full softmax over items.  Data are synthetic sessions drawn
from a latent-factor model.
"""
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class RecConfig:
    n_users: int = 200
    n_items: int = 300
    dim: int = 32
    max_norm: float = 1.0
    history_len: int = 8
    batch_size: int = 64
    epochs: int = 2
    lr_dense: float = 3e-3
    lr_sparse: float = 5e-2
    temperature: float = 0.1
    l2: float = 1e-6
    topk: int = 10
    seed: int = 13


class ItemTower(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.item_emb = nn.Embedding(cfg.n_items, cfg.dim, max_norm=cfg.max_norm)
        self.proj = nn.Sequential(nn.Linear(cfg.dim, cfg.dim), nn.Tanh(), nn.Linear(cfg.dim, cfg.dim))

    def encode_catalog(self):
        weight = self.item_emb.weight
        return F.normalize(self.proj(weight) + weight, dim=-1)

    def forward(self, item_ids):
        return self.item_emb(item_ids)


class UserTower(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.user_emb = nn.Embedding(cfg.n_users, cfg.dim)
        self.attn = nn.Linear(cfg.dim, 1)
        self.mlp = nn.Sequential(nn.Linear(2 * cfg.dim, cfg.dim), nn.ReLU(), nn.Linear(cfg.dim, cfg.dim))

    def forward(self, user_ids, hist_emb, hist_mask):
        scores = self.attn(hist_emb).squeeze(-1).masked_fill(~hist_mask, -1e4)
        pooled = (scores.softmax(-1).unsqueeze(-1) * hist_emb).sum(1)
        return F.normalize(self.mlp(torch.cat([self.user_emb(user_ids), pooled], -1)), dim=-1)


class TwoTowerRecommender(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.items = ItemTower(cfg)
        self.users = UserTower(cfg)

    def forward(self, user_ids, history, hist_mask):
        catalog = self.items.encode_catalog()
        hist_emb = self.items(history)
        user_vec = self.users(user_ids, hist_emb, hist_mask)
        return user_vec @ catalog.T / self.cfg.temperature

    def sparse_parameters(self):
        return [self.items.item_emb.weight, self.users.user_emb.weight]

    def dense_parameters(self):
        sparse = {id(p) for p in self.sparse_parameters()}
        return [p for p in self.parameters() if id(p) not in sparse]


def simulate_sessions(cfg, rng):
    u_f = rng.standard_normal((cfg.n_users, 8))
    i_f = rng.standard_normal((cfg.n_items, 8))
    logits = u_f @ i_f.T
    probs = np.exp(logits - logits.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    seqs = [rng.choice(cfg.n_items, size=cfg.history_len + 2, p=probs[u]) for u in range(cfg.n_users)]
    return np.stack(seqs)


class SessionDataset:
    def __init__(self, seqs, cfg, split):
        self.cfg = cfg
        self.users = np.arange(len(seqs))
        if split == "train":
            self.hist, self.target = seqs[:, :cfg.history_len], seqs[:, cfg.history_len]
        else:
            self.hist, self.target = seqs[:, 1:cfg.history_len + 1], seqs[:, cfg.history_len + 1]

    def batches(self, rng, shuffle=True):
        order = rng.permutation(len(self.users)) if shuffle else np.arange(len(self.users))
        for i in range(0, len(order), self.cfg.batch_size):
            idx = order[i:i + self.cfg.batch_size]
            hist = torch.as_tensor(self.hist[idx])
            mask = torch.ones_like(hist, dtype=torch.bool)
            yield (torch.as_tensor(self.users[idx]), hist, mask, torch.as_tensor(self.target[idx]))


def recall_ndcg(model, data, cfg, rng):
    model.eval()
    hits, ndcg, n = 0.0, 0.0, 0
    with torch.no_grad():
        for users, hist, mask, target in data.batches(rng, shuffle=False):
            topk = model(users, hist, mask).topk(cfg.topk, dim=-1).indices
            match = (topk == target[:, None]).float()
            hits += match.sum().item()
            ranks = match.argmax(-1).float()
            ndcg += (match.sum(-1) / torch.log2(ranks + 2)).sum().item()
            n += len(users)
    model.train()
    return hits / n, ndcg / n


def train(cfg):
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    seqs = simulate_sessions(cfg, rng)
    train_set, test_set = SessionDataset(seqs, cfg, "train"), SessionDataset(seqs, cfg, "test")
    model = TwoTowerRecommender(cfg)
    dense_opt = torch.optim.Adam(model.dense_parameters(), lr=cfg.lr_dense)
    sparse_opt = torch.optim.Adagrad(model.sparse_parameters(), lr=cfg.lr_sparse)
    for epoch in range(cfg.epochs):
        total = 0.0
        for users, hist, mask, target in train_set.batches(rng):
            logits = model(users, hist, mask)
            loss = F.cross_entropy(logits, target)
            loss = loss + cfg.l2 * model.users.user_emb(users).pow(2).sum()
            dense_opt.zero_grad()
            sparse_opt.zero_grad()
            loss.backward()  # raises
            dense_opt.step()
            sparse_opt.step()
            total += loss.item() * len(users)
        rec, ndcg = recall_ndcg(model, test_set, cfg, rng)
        print(f"epoch {epoch}: loss {total / len(train_set.users):.4f} "
              f"recall@{cfg.topk} {rec:.3f} ndcg@{cfg.topk} {ndcg:.3f}")


if __name__ == "__main__":
    train(RecConfig())
