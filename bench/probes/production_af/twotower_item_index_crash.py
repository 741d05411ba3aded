# expect: freed_graph
# source: https://discuss.pytorch.org/t/how-to-update-item-embeddings-in-every-epoch-and-user-embeddings-in-each-batch-in-an-epoch-runtimeerror-trying-to-backward-through-the-graph-a-second-time/124239
"""Two-tower retrieval model for a news/item recommender.

An item tower encodes every item in the catalogue (id embedding + category + text
features) and a user tower encodes the user's click history, attending over the item
embeddings of the clicked items.  Scores are user x item dot products trained with
BCE on sampled labels.  The item embeddings are refreshed once per epoch, the user
embeddings once per batch.  Synthetic catalogue and click logs, CPU only.
"""
import argparse
import math
import random
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def seed_everything(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@dataclass
class RecConfig:
    num_items: int = 120
    num_categories: int = 8
    text_dim: int = 24
    item_embed_dim: int = 32
    history_len: int = 10
    batch_size: int = 16
    num_batches: int = 4
    num_epochs: int = 2
    lr: float = 1e-3
    weight_decay: float = 1e-5
    temperature: float = 1.0
    log_every: int = 2
    extra: dict = field(default_factory=lambda: {"dropout": 0.1})


class ItemModel(nn.Module):
    """Item tower: id + category + text features -> item embedding."""

    def __init__(self, cfg: RecConfig):
        super().__init__()
        self.id_embed = nn.Embedding(cfg.num_items, cfg.item_embed_dim)
        self.cat_embed = nn.Embedding(cfg.num_categories, cfg.item_embed_dim)
        self.text_proj = nn.Sequential(
            nn.Linear(cfg.text_dim, cfg.item_embed_dim),
            nn.GELU(),
            nn.Linear(cfg.item_embed_dim, cfg.item_embed_dim),
        )
        self.norm = nn.LayerNorm(cfg.item_embed_dim)

    def forward(self, item_input):
        ids, cats, text = item_input
        h = self.id_embed(ids) + self.cat_embed(cats) + self.text_proj(text)
        return self.norm(h)


class UserModel(nn.Module):
    """User tower: attends over the embeddings of the items in the click history."""

    def __init__(self, cfg: RecConfig):
        super().__init__()
        d = cfg.item_embed_dim
        self.query = nn.Parameter(torch.randn(d) / math.sqrt(d))
        self.key = nn.Linear(d, d)
        self.value = nn.Linear(d, d)
        self.out = nn.Sequential(nn.Linear(d, d), nn.Tanh(), nn.Dropout(cfg.extra["dropout"]))

    def forward(self, history, item_embeddings):
        hist_emb = item_embeddings[history]                 # B x L x d
        keys = self.key(hist_emb)
        attn = torch.softmax(keys @ self.query / math.sqrt(keys.size(-1)), dim=-1)
        pooled = (attn.unsqueeze(-1) * self.value(hist_emb)).sum(1)
        return self.out(pooled)


class Catalogue:
    def __init__(self, cfg: RecConfig):
        g = torch.Generator().manual_seed(1)
        self.ids = torch.arange(cfg.num_items)
        self.cats = torch.randint(0, cfg.num_categories, (cfg.num_items,), generator=g)
        self.text = torch.randn(cfg.num_items, cfg.text_dim, generator=g)

    def as_input(self):
        return self.ids, self.cats, self.text


def make_click_loader(cfg: RecConfig, seed: int):
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(cfg.num_batches):
        history = torch.randint(0, cfg.num_items, (cfg.batch_size, cfg.history_len), generator=g)
        label = (torch.rand(cfg.batch_size, cfg.num_items, generator=g) < 0.05).float()
        batches.append({"data": history, "label": label})
    return batches


class MetricTracker:
    def __init__(self):
        self.values = {}

    def update(self, name, value):
        self.values.setdefault(name, []).append(float(value))

    def mean(self, name):
        vals = self.values.get(name, [])
        return sum(vals) / max(len(vals), 1)


def recall_at_k(scores, labels, k=10):
    topk = scores.topk(k, dim=-1).indices
    hits = labels.gather(1, topk).sum(-1)
    denom = labels.sum(-1).clamp(min=1.0)
    return (hits / denom).mean().item()


class RecTrainer:
    def __init__(self, cfg: RecConfig, device="cpu"):
        self.cfg = cfg
        self.device = torch.device(device)
        self.user_model = UserModel(cfg).to(self.device)
        self.item_model = ItemModel(cfg).to(self.device)
        self.catalogue = Catalogue(cfg)
        self.criterion = nn.BCEWithLogitsLoss().to(self.device)
        self.optimizer = torch.optim.Adam(
            list(self.user_model.parameters()) + list(self.item_model.parameters()),
            lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=1, gamma=0.9)
        self.metrics = MetricTracker()
        self.item_embeddings = None
        self.global_step = 0

    def refresh_item_index(self):
        # item_embeddings = [ITEMS NUM, item_embed_dim]; refreshed once per epoch
        self.item_embeddings = self.item_model(self.catalogue.as_input())
        return self.item_embeddings

    def score(self, user_embeddings, item_embeddings):
        return torch.matmul(user_embeddings, item_embeddings.T) / self.cfg.temperature

    def train_step(self, batch):
        data = batch["data"].to(self.device)
        label = batch["label"].to(self.device)
        self.optimizer.zero_grad()
        item_embeddings = self.item_embeddings
        user_embeddings = self.user_model(data, item_embeddings)
        score = self.score(user_embeddings, item_embeddings)
        loss = self.criterion(score, label)
        loss.backward()  # raises
        torch.nn.utils.clip_grad_norm_(self.user_model.parameters(), 5.0)
        self.optimizer.step()
        self.global_step += 1
        return loss.item(), recall_at_k(score.detach(), label)

    def train_epoch(self, epoch, loader):
        self.user_model.train()
        self.item_model.train()
        self.refresh_item_index()
        for idx, batch in enumerate(loader):
            loss, rec = self.train_step(batch)
            self.metrics.update("train_loss", loss)
            self.metrics.update("train_recall", rec)
            if idx % self.cfg.log_every == 0:
                print(f"epoch {epoch} batch {idx} loss {loss:.4f} recall@10 {rec:.3f}")
        self.scheduler.step()

    @torch.no_grad()
    def evaluate(self, loader):
        self.user_model.eval()
        self.item_model.eval()
        item_embeddings = self.item_model(self.catalogue.as_input())
        recalls = []
        for batch in loader:
            user_embeddings = self.user_model(batch["data"], item_embeddings)
            recalls.append(recall_at_k(self.score(user_embeddings, item_embeddings), batch["label"]))
        return float(np.mean(recalls))


def parse_args(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    seed_everything(args.seed)
    cfg = RecConfig(num_epochs=args.epochs, lr=args.lr)
    trainer = RecTrainer(cfg)
    train_loader = make_click_loader(cfg, seed=10)
    valid_loader = make_click_loader(cfg, seed=11)
    for epoch in range(cfg.num_epochs):
        trainer.train_epoch(epoch, train_loader)
        val_recall = trainer.evaluate(valid_loader)
        print(f"epoch {epoch} valid recall@10 {val_recall:.3f} "
              f"train loss {trainer.metrics.mean('train_loss'):.4f}")


if __name__ == "__main__":
    main([])
