# expect: clean
# source: https://github.com/docarray/docarray/pull/1429
"""End-to-end retrieval-augmented generation with a refreshable document index.

A question encoder and a context encoder (both trainable, RAG-end2end style)
embed queries and passages; an in-memory exact-NN document index (docarray
DocIndex style, numpy backed) serves top-k passages; a small generator scores
the answer tokens conditioned on each retrieved passage and marginalises over
doc_scores.  A callback periodically re-embeds the corpus with the current
context encoder and re-indexes it.  Synthetic token corpus, CPU only.
"""
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

config = SimpleNamespace(vocab=120, dim=32, n_docs=24, doc_len=8, q_len=6, ans_len=4, top_k=3,
                         lr=1e-3, ctx_lr=5e-4, steps=6, index_refresh_every=3, batch_size=4)


def _to_numpy(tensor):
    if isinstance(tensor, np.ndarray):
        return tensor
    return tensor.detach().cpu().numpy()


class Doc:
    def __init__(self, id, tokens, embedding=None):
        self.id, self.tokens, self.embedding = id, tokens, embedding


class InMemoryExactNNIndex:
    def __init__(self, space="cosine"):
        self.space = space
        self._docs = []
        self._emb = None

    def index(self, docs):
        self._docs = list(docs)
        self._emb = np.stack([_to_numpy(d.embedding) for d in self._docs]).astype(np.float32)
        if self.space == "cosine":
            self._emb /= np.linalg.norm(self._emb, axis=1, keepdims=True) + 1e-8

    def find_batched(self, queries, limit):
        q = _to_numpy(queries).astype(np.float32)
        if self.space == "cosine":
            q = q / (np.linalg.norm(q, axis=1, keepdims=True) + 1e-8)
        scores = q @ self._emb.T
        idx = np.argsort(-scores, axis=1)[:, :limit]
        return [[self._docs[j] for j in row] for row in idx], np.take_along_axis(scores, idx, 1)

    def __len__(self):
        return len(self._docs)


class Encoder(nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.proj = nn.Sequential(nn.Linear(dim, dim), nn.Tanh(), nn.Linear(dim, dim))

    def forward(self, ids):
        return self.proj(self.emb(ids).mean(1))


class Generator(nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.rnn = nn.GRU(dim, dim, batch_first=True)
        self.head = nn.Linear(dim, vocab)

    def forward(self, context_ids, answer_ids):
        x = torch.cat([context_ids, answer_ids[:, :-1]], 1)
        h, _ = self.rnn(self.emb(x))
        logits = self.head(h[:, context_ids.shape[1] - 1:])
        return -F.cross_entropy(logits.transpose(1, 2), answer_ids, reduction="none").sum(1)


class RagModel(nn.Module):
    def __init__(self, cfg, index):
        super().__init__()
        self.cfg = cfg
        self.question_encoder = Encoder(cfg.vocab, cfg.dim)
        self.ctx_encoder = Encoder(cfg.vocab, cfg.dim)
        self.generator = Generator(cfg.vocab, cfg.dim)
        self.index = index

    def retrieve(self, question_hidden_states):
        docs, _ = self.index.find_batched(question_hidden_states.detach(), limit=self.cfg.top_k)
        return docs

    def forward(self, q_ids, answer_ids):
        q_h = self.question_encoder(q_ids)
        docs = self.retrieve(q_h)
        doc_tokens = torch.stack([torch.stack([d.tokens for d in row]) for row in docs])
        doc_emb = self.ctx_encoder(doc_tokens.view(-1, doc_tokens.shape[-1])).view(len(docs), self.cfg.top_k, -1)
        doc_scores = torch.bmm(q_h.unsqueeze(1), doc_emb.transpose(1, 2)).squeeze(1)
        ctx = torch.cat([doc_tokens, q_ids[:, None].expand(-1, self.cfg.top_k, -1)], -1)
        ans = answer_ids[:, None].expand(-1, self.cfg.top_k, -1)
        seq_logprob = self.generator(ctx.reshape(-1, ctx.shape[-1]), ans.reshape(-1, ans.shape[-1]))
        seq_logprob = seq_logprob.view(len(docs), self.cfg.top_k)
        nll = -torch.logsumexp(seq_logprob + F.log_softmax(doc_scores, dim=1), dim=1)
        return nll.mean()


class IndexRefreshCallback:
    def __init__(self, every):
        self.every = every

    def on_step_end(self, trainer, step):
        if step % self.every == 0:
            trainer.refresh_index()


class RagTrainer:
    def __init__(self, cfg):
        self.cfg = cfg
        g = torch.Generator().manual_seed(0)
        self.corpus = [Doc(i, torch.randint(0, cfg.vocab, (cfg.doc_len,), generator=g)) for i in range(cfg.n_docs)]
        self.model = RagModel(cfg, InMemoryExactNNIndex())
        with torch.no_grad():
            self.embed_corpus()
        self.model.index.index(self.corpus)
        self.optimizer = torch.optim.AdamW([
            {"params": list(self.model.question_encoder.parameters()) + list(self.model.generator.parameters()),
             "lr": cfg.lr},
            {"params": self.model.ctx_encoder.parameters(), "lr": cfg.ctx_lr}])
        self.scheduler = torch.optim.lr_scheduler.LinearLR(self.optimizer, 1.0, 0.5, total_iters=cfg.steps)
        self.callbacks = [IndexRefreshCallback(cfg.index_refresh_every)]
        self.batches = [(torch.randint(0, cfg.vocab, (cfg.batch_size, cfg.q_len), generator=g),
                         torch.randint(0, cfg.vocab, (cfg.batch_size, cfg.ans_len), generator=g))
                        for _ in range(cfg.steps)]

    def embed_corpus(self):
        tokens = torch.stack([d.tokens for d in self.corpus])
        embeddings = self.model.ctx_encoder(tokens)
        for d, e in zip(self.corpus, embeddings):
            d.embedding = e

    def refresh_index(self):
        self.embed_corpus()
        self.model.index.index(self.corpus)

    def train_step(self, q_ids, a_ids):
        self.model.train()
        loss = self.model(q_ids, a_ids)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        return loss.item()

    @torch.no_grad()
    def evaluate(self):
        self.model.eval()
        return float(np.mean([self.model(q, a).item() for q, a in self.batches[:2]]))

    def fit(self):
        for step, (q, a) in enumerate(self.batches, 1):
            print("step %d loss %.4f" % (step, self.train_step(q, a)))
            for cb in self.callbacks:
                cb.on_step_end(self, step)
        print("eval nll %.4f" % self.evaluate())


def main():
    torch.manual_seed(0)
    np.random.seed(0)
    RagTrainer(config).fit()


if __name__ == "__main__":
    main()
