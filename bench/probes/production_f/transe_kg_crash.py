# expect: leaf_inplace
# source: https://github.com/pytorch/pytorch/pull/18684
"""TransE knowledge-graph embeddings (Bordes et al., 2013).

Triples of a synthetic graph are generated from hidden "true" embeddings.
Training uses margin ranking against corrupted triples with Bernoulli
head/tail replacement (Wang et al., 2014).  As in Algorithm 1 of the TransE
paper, entity vectors touched by a batch are kept inside the unit ball.
"""
from dataclasses import dataclass
from typing import Dict, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class TransEConfig:
    n_entities: int = 60
    n_relations: int = 6
    n_triples: int = 400
    dim: int = 16
    p_norm: int = 1
    margin: float = 1.0
    lr: float = 0.01
    batch_size: int = 64
    epochs: int = 2
    neg_ratio: int = 1
    eval_triples: int = 40
    seed: int = 13


def synth_kg(cfg: TransEConfig) -> torch.Tensor:
    g = torch.Generator().manual_seed(cfg.seed)
    ent = F.normalize(torch.randn(cfg.n_entities, cfg.dim, generator=g), dim=1)
    rel = 0.5 * torch.randn(cfg.n_relations, cfg.dim, generator=g)
    heads = torch.randint(0, cfg.n_entities, (cfg.n_triples,), generator=g)
    rels = torch.randint(0, cfg.n_relations, (cfg.n_triples,), generator=g)
    tails = torch.cdist(ent[heads] + rel[rels], ent).argmin(dim=1)
    return torch.unique(torch.stack([heads, rels, tails], 1), dim=0)


class BernoulliSampler:
    """Corrupts heads with prob tph/(tph+hpt) per relation, tails otherwise."""

    def __init__(self, triples: torch.Tensor, n_entities: int, n_relations: int):
        self.n_entities = n_entities
        self.known = {tuple(t) for t in triples.tolist()}
        self.head_prob = torch.full((n_relations,), 0.5)
        for r in range(n_relations):
            sub = triples[triples[:, 1] == r]
            if len(sub) == 0:
                continue
            tph = len(sub) / len(torch.unique(sub[:, 0]))
            hpt = len(sub) / len(torch.unique(sub[:, 2]))
            self.head_prob[r] = tph / (tph + hpt)

    def corrupt(self, pos: torch.Tensor, ratio: int) -> torch.Tensor:
        pos = pos.repeat(ratio, 1)
        neg = pos.clone()
        replace_head = torch.rand(len(pos)) < self.head_prob[pos[:, 1]]
        rnd = torch.randint(0, self.n_entities, (len(pos),))
        neg[replace_head, 0] = rnd[replace_head]
        neg[~replace_head, 2] = rnd[~replace_head]
        return neg


class TransE(nn.Module):
    def __init__(self, cfg: TransEConfig):
        super().__init__()
        self.p_norm = cfg.p_norm
        self.ent_embeddings = nn.Embedding(cfg.n_entities, cfg.dim)
        self.rel_embeddings = nn.Embedding(cfg.n_relations, cfg.dim)
        bound = 6.0 / cfg.dim ** 0.5
        nn.init.uniform_(self.ent_embeddings.weight, -bound, bound)
        nn.init.uniform_(self.rel_embeddings.weight, -bound, bound)
        with torch.no_grad():
            self.rel_embeddings.weight.copy_(F.normalize(self.rel_embeddings.weight, dim=1))

    def score(self, triples: torch.Tensor) -> torch.Tensor:
        h = self.ent_embeddings(triples[:, 0])
        r = self.rel_embeddings(triples[:, 1])
        t = self.ent_embeddings(triples[:, 2])
        return torch.norm(h + r - t, p=self.p_norm, dim=-1)

    def constrain_entities(self, ids: torch.Tensor):
        torch.embedding_renorm_(self.ent_embeddings.weight, ids, 1.0, 2.0)  # raises

    def forward(self, pos, neg):
        return self.score(pos), self.score(neg)


class MarginLoss(nn.Module):
    def __init__(self, margin):
        super().__init__()
        self.criterion = nn.MarginRankingLoss(margin=margin)

    def forward(self, p_score, n_score):
        p_score = p_score.repeat(n_score.numel() // p_score.numel())
        target = -torch.ones_like(p_score)
        return self.criterion(p_score, n_score, target)


class TransETrainer:
    def __init__(self, cfg: TransEConfig):
        torch.manual_seed(cfg.seed)
        self.cfg = cfg
        triples = synth_kg(cfg)
        perm = torch.randperm(len(triples))
        self.test = triples[perm[:cfg.eval_triples]]
        self.train_triples = triples[perm[cfg.eval_triples:]]
        self.sampler = BernoulliSampler(triples, cfg.n_entities, cfg.n_relations)
        self.model = TransE(cfg)
        self.loss_fn = MarginLoss(cfg.margin)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=cfg.lr)
        self.history: Dict[str, list] = {"loss": [], "mr": []}

    def train_batch(self, pos: torch.Tensor) -> float:
        neg = self.sampler.corrupt(pos, self.cfg.neg_ratio)
        p_score, n_score = self.model(pos, neg)
        loss = self.loss_fn(p_score, n_score)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        touched = torch.unique(torch.cat([pos[:, 0], pos[:, 2], neg[:, 0], neg[:, 2]]))
        self.model.constrain_entities(touched)
        return loss.item()

    @torch.no_grad()
    def link_prediction(self) -> Tuple[float, float]:
        ranks = []
        all_ent = self.model.ent_embeddings.weight
        for h, r, t in self.test.tolist():
            q = self.model.ent_embeddings.weight[h] + self.model.rel_embeddings.weight[r]
            d = torch.norm(q[None] - all_ent, p=self.cfg.p_norm, dim=-1)
            ranks.append(int((d < d[t]).sum()) + 1)
        ranks = torch.tensor(ranks, dtype=torch.float)
        return ranks.mean().item(), (ranks <= 10).float().mean().item()

    def run(self):
        for epoch in range(self.cfg.epochs):
            perm = torch.randperm(len(self.train_triples))
            losses = []
            for i in range(0, len(perm), self.cfg.batch_size):
                losses.append(self.train_batch(self.train_triples[perm[i:i + self.cfg.batch_size]]))
            mr, hits10 = self.link_prediction()
            self.history["loss"].append(sum(losses) / len(losses))
            self.history["mr"].append(mr)
            print(f"epoch {epoch} loss {self.history['loss'][-1]:.4f} MR {mr:.1f} Hits@10 {hits10:.3f}")


if __name__ == "__main__":
    TransETrainer(TransEConfig()).run()
