# expect: clean
# source: https://github.com/pykeen/pykeen/issues/571
"""Link prediction with CompGCN (pykeen layout): a triples factory with inverse
triples, CompGCN message passing whose enriched entity/relation
representations are buffered between parameter updates, a DistMult
interaction, sLCWA training with negative sampling, and an early stopper that
runs rank-based evaluation every epoch.  The knowledge graph is synthetic.
"""
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2)
np.random.seed(2)


# ------------------------------------------------------------------ triples
class TriplesFactory:
    def __init__(self, mapped_triples: torch.LongTensor, num_entities: int, num_relations: int,
                 create_inverse_triples: bool = True):
        self.num_entities = num_entities
        self.real_num_relations = num_relations
        self.create_inverse_triples = create_inverse_triples
        if create_inverse_triples:
            inverse = torch.stack([mapped_triples[:, 2], mapped_triples[:, 1] + num_relations, mapped_triples[:, 0]], 1)
            mapped_triples = torch.cat([mapped_triples, inverse], 0)
        self.mapped_triples = mapped_triples
        self.num_triples = len(mapped_triples)


def make_nations_like(num_entities=14, num_relations=5, num_triples=90):
    h = torch.randint(0, num_entities, (num_triples,))
    r = torch.randint(0, num_relations, (num_triples,))
    t = (h + 3 * r + 1) % num_entities
    triples = torch.unique(torch.stack([h, r, t], 1), dim=0)
    perm = torch.randperm(len(triples))
    n_train = int(0.8 * len(triples))
    return triples[perm[:n_train]], triples[perm[n_train:]]


# ------------------------------------------------------------------ nn/emb.py
class Embedding(nn.Module):
    def __init__(self, num_embeddings: int, embedding_dim: int):
        super().__init__()
        self.max_id, self.embedding_dim = num_embeddings, embedding_dim
        self._embeddings = nn.Embedding(num_embeddings, embedding_dim)
        nn.init.xavier_uniform_(self._embeddings.weight)

    def forward(self, indices: Optional[torch.LongTensor] = None):
        if indices is None:
            return self._embeddings.weight
        return self._embeddings(indices)


class CompGCNLayer(nn.Module):
    """A single CompGCN layer with multiplicative composition."""

    def __init__(self, input_dim: int, output_dim: int, dropout: float = 0.1):
        super().__init__()
        self.w_loop = nn.Parameter(torch.empty(input_dim, output_dim))
        self.w_fwd = nn.Parameter(torch.empty(input_dim, output_dim))
        self.w_bwd = nn.Parameter(torch.empty(input_dim, output_dim))
        self.self_loop = nn.Parameter(torch.empty(1, input_dim))
        self.w_rel = nn.Linear(input_dim, output_dim)
        self.drop = nn.Dropout(dropout)
        self.bn = nn.BatchNorm1d(output_dim)
        self.bias = nn.Parameter(torch.zeros(output_dim))
        for w in (self.w_loop, self.w_fwd, self.w_bwd, self.self_loop):
            nn.init.xavier_uniform_(w)

    def message(self, x_e, x_r, edge_index, edge_type, weight):
        source, target = edge_index
        m = (x_e[source] * x_r[edge_type]) @ weight
        deg = torch.bincount(target, minlength=x_e.shape[0]).clamp(min=1).float()
        m = m * (1.0 / deg[target]).unsqueeze(dim=-1)
        x_e = x_e.new_zeros(x_e.shape[0], m.shape[1]).index_add(dim=0, index=target, source=m)
        return self.drop(x_e)

    def forward(self, x_e, x_r, edge_index, edge_type) -> Tuple[torch.FloatTensor, torch.FloatTensor]:
        # split forward / inverse edges (inverse relations are the second half)
        num_relations = x_r.shape[0] // 2
        fwd = edge_type < num_relations
        out = 1 / 3 * (
            (x_e * self.self_loop) @ self.w_loop
            + self.message(x_e, x_r, edge_index[:, fwd], edge_type[fwd], self.w_fwd)
            + self.message(x_e, x_r, edge_index[:, ~fwd], edge_type[~fwd], self.w_bwd)
        )
        x_e = torch.tanh(self.bn(out + self.bias))
        return x_e, self.w_rel(x_r)


class CombinedCompGCNRepresentations(nn.Module):
    """A sequence of CompGCN layers computing enriched entity and relation representations."""

    def __init__(self, *, triples_factory: TriplesFactory, embedding_dim: int, num_layers: int = 2):
        super().__init__()
        assert triples_factory.create_inverse_triples
        self.entity_representations = Embedding(triples_factory.num_entities, embedding_dim)
        self.relation_representations = Embedding(2 * triples_factory.real_num_relations, embedding_dim)
        self.layers = nn.ModuleList(CompGCNLayer(embedding_dim, embedding_dim) for _ in range(num_layers))
        self.register_buffer(name="edge_index", tensor=triples_factory.mapped_triples[:, [0, 2]].t())
        self.register_buffer(name="edge_type", tensor=triples_factory.mapped_triples[:, 1])
        # initialize buffer of enriched representations
        self.enriched_representations = None

    def post_parameter_update(self) -> None:
        # invalidate enriched embeddings
        self.enriched_representations = None

    def train(self, mode: bool = True):
        # when changing from evaluation to training mode, the buffered representations have been computed without
        # gradient tracking. hence, we need to invalidate them.
        if mode and not self.training:
            self.enriched_representations = None
        return super().train(mode=mode)

    def forward(self) -> Tuple[torch.FloatTensor, torch.FloatTensor]:
        """Compute enriched representations."""
        if self.enriched_representations is None:
            x_e = self.entity_representations()
            x_r = self.relation_representations()
            for layer in self.layers:
                x_e, x_r = layer(x_e=x_e, x_r=x_r, edge_index=self.edge_index, edge_type=self.edge_type)
            self.enriched_representations = (x_e, x_r)
        return self.enriched_representations


class SingleCompGCNRepresentation(nn.Module):
    """A wrapper around the combined representation module."""

    def __init__(self, combined: CombinedCompGCNRepresentations, position: int = 0):
        super().__init__()
        self.combined = combined
        self.position = position

    def forward(self, indices: Optional[torch.LongTensor] = None) -> torch.FloatTensor:
        x = self.combined()[self.position]
        return x if indices is None else x[indices]


# ------------------------------------------------------------------ models
class CompGCN(nn.Module):
    def __init__(self, *, triples_factory: TriplesFactory, embedding_dim: int = 16, num_layers: int = 2):
        super().__init__()
        self.combined = CombinedCompGCNRepresentations(triples_factory=triples_factory,
                                                       embedding_dim=embedding_dim, num_layers=num_layers)
        self.entity_representations = SingleCompGCNRepresentation(self.combined, position=0)
        self.relation_representations = SingleCompGCNRepresentation(self.combined, position=1)

    def post_parameter_update(self):
        self.combined.post_parameter_update()

    def score_hrt(self, hrt_batch: torch.LongTensor) -> torch.FloatTensor:
        h = self.entity_representations(hrt_batch[:, 0])
        r = self.relation_representations(hrt_batch[:, 1])
        t = self.entity_representations(hrt_batch[:, 2])
        return (h * r * t).sum(dim=-1)  # DistMult

    def score_t(self, hr_batch: torch.LongTensor) -> torch.FloatTensor:
        h = self.entity_representations(hr_batch[:, 0])
        r = self.relation_representations(hr_batch[:, 1])
        return (h * r) @ self.entity_representations().t()


# ------------------------------------------------------------------ evaluation / stopping
@torch.no_grad()
def evaluate(model: CompGCN, mapped_triples: torch.LongTensor) -> dict:
    model.eval()
    scores = model.score_t(mapped_triples[:, :2])
    true = scores.gather(1, mapped_triples[:, 2:3])
    ranks = (scores > true).sum(dim=1).float() + 1
    return {"mean_reciprocal_rank": (1 / ranks).mean().item(), "hits_at_10": (ranks <= 10).float().mean().item()}


@dataclass
class EarlyStopper:
    model: CompGCN
    evaluation_triples: torch.LongTensor
    frequency: int = 1
    patience: int = 2
    results: List[float] = field(default_factory=list)
    best_metric: float = -1.0
    remaining_patience: int = 2

    def should_evaluate(self, epoch: int) -> bool:
        return epoch % self.frequency == 0

    def should_stop(self, epoch: int) -> bool:
        metric = evaluate(self.model, self.evaluation_triples)["mean_reciprocal_rank"]
        self.results.append(metric)
        if metric > self.best_metric:
            self.best_metric, self.remaining_patience = metric, self.patience
        else:
            self.remaining_patience -= 1
        print(f"epoch {epoch}: validation MRR {metric:.4f}")
        return self.remaining_patience < 0


# ------------------------------------------------------------------ training/slcwa.py
class SLCWATrainingLoop:
    def __init__(self, model: CompGCN, triples_factory: TriplesFactory, lr: float = 0.01, num_negs_per_pos: int = 2):
        self.model = model
        self.triples_factory = triples_factory
        self.optimizer = torch.optim.Adam(model.parameters(), lr=lr)
        self.num_negs_per_pos = num_negs_per_pos

    def _corrupt(self, positive_batch):
        negatives = positive_batch.repeat_interleave(self.num_negs_per_pos, dim=0)
        corrupt_head = torch.rand(len(negatives)) < 0.5
        random_entities = torch.randint(0, self.triples_factory.num_entities, (len(negatives),))
        negatives[corrupt_head, 0] = random_entities[corrupt_head]
        negatives[~corrupt_head, 2] = random_entities[~corrupt_head]
        return negatives

    def _forward_pass(self, positive_batch) -> float:
        negative_batch = self._corrupt(positive_batch)
        positive_scores = self.model.score_hrt(positive_batch)
        negative_scores = self.model.score_hrt(negative_batch)
        loss = (F.softplus(-positive_scores).mean() + F.softplus(negative_scores).mean()) / 2
        loss.backward()
        return loss.item()

    def train(self, num_epochs: int, batch_size: int, stopper: Optional[EarlyStopper] = None):
        losses = []
        triples = self.triples_factory.mapped_triples
        for epoch in range(1, num_epochs + 1):
            self.model.train()
            epoch_loss = 0.0
            for batch in torch.randperm(len(triples)).split(batch_size):
                self.optimizer.zero_grad()
                epoch_loss += self._forward_pass(triples[batch])
                self.optimizer.step()
                self.model.post_parameter_update()
            losses.append(epoch_loss)
            print(f"epoch {epoch}: training loss {epoch_loss:.4f}")
            if stopper is not None and stopper.should_evaluate(epoch) and stopper.should_stop(epoch):
                break
        return losses


if __name__ == "__main__":
    train_triples, valid_triples = make_nations_like()
    training = TriplesFactory(train_triples, num_entities=14, num_relations=5, create_inverse_triples=True)
    model = CompGCN(triples_factory=training, embedding_dim=16, num_layers=2)
    stopper = EarlyStopper(model=model, evaluation_triples=valid_triples, frequency=1)
    loop = SLCWATrainingLoop(model=model, triples_factory=training, lr=0.01)
    losses = loop.train(num_epochs=3, batch_size=32, stopper=stopper)
    print("final", evaluate(model, valid_triples))
