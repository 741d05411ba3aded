# expect: clean
# source: https://github.com/huggingface/sentence-transformers/issues/2667
"""Bi-encoder retrieval fine-tuning with a GradCache-style guided loss.

Modelled on sentence-transformers v3: a SentenceTransformer-like encoder
(token embedding -> MLP -> masked mean pooling) is trained with
CachedGISTEmbedLoss, which embeds mini-batches without graph, computes the
in-batch contrastive loss on detached representations (false negatives are
filtered with a frozen guide model), caches the representation gradients and
replays the forward passes in a backward hook.  A small Trainer runs
training steps, a linear warmup schedule, callbacks and an eval loop on
synthetic (anchor, positive) token pairs.
"""
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class RandContext:
    """Random-state context manager so the replayed forward sees the same dropout masks."""

    def __init__(self, *tensors):
        self.fwd_cpu_state = torch.get_rng_state()
        self._fork = None

    def __enter__(self):
        self._fork = torch.random.fork_rng(devices=[])
        self._fork.__enter__()
        torch.set_rng_state(self.fwd_cpu_state)

    def __exit__(self, exc_type, exc_val, exc_tb):
        self._fork.__exit__(exc_type, exc_val, exc_tb)
        self._fork = None


class TinySentenceEncoder(nn.Module):
    def __init__(self, vocab_size=200, dim=32, dropout=0.1):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.mlp = nn.Sequential(nn.Linear(dim, dim * 2), nn.GELU(), nn.Dropout(dropout), nn.Linear(dim * 2, dim))
        self.norm = nn.LayerNorm(dim)

    def forward(self, features):
        tok = self.embed(features["input_ids"])
        tok = self.norm(tok + self.mlp(tok))
        mask = features["attention_mask"].unsqueeze(-1).float()
        features["sentence_embedding"] = (tok * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return features


def _backward_hook(grad_output, sentence_features, loss_obj):
    """Replay the mini-batch forwards with grad and push the cached gradients through them."""
    assert loss_obj.cache is not None and loss_obj.random_states is not None
    with torch.enable_grad():
        for sentence_feature, grad, random_states in zip(sentence_features, loss_obj.cache, loss_obj.random_states):
            for (reps_mb, _, _), grad_mb in zip(
                loss_obj.embed_minibatch_iter(sentence_feature, with_grad=True, copy_random_state=False,
                                              random_states=random_states), grad):
                surrogate = torch.dot(reps_mb.flatten(), grad_mb.flatten()) * grad_output
                surrogate.backward()


class CachedGISTEmbedLoss(nn.Module):
    def __init__(self, model, guide, temperature=0.05, mini_batch_size=4):
        super().__init__()
        self.model, self.guide = model, guide
        self.temperature = temperature
        self.similarity_fct = nn.CosineSimilarity(dim=-1)
        self.cross_entropy_loss = nn.CrossEntropyLoss()
        self.mini_batch_size = mini_batch_size
        self.cache = None
        self.random_states = None

    def sim_matrix(self, embed1, embed2):
        return self.similarity_fct(embed1.unsqueeze(1), embed2.unsqueeze(0))

    def embed_minibatch(self, sentence_feature, begin, end, with_grad, copy_random_state, random_state=None):
        grad_context = nullcontext if with_grad else torch.no_grad
        random_state_context = nullcontext() if random_state is None else random_state
        mb = {k: v[begin:end] for k, v in sentence_feature.items()}
        with random_state_context:
            with grad_context():
                random_state = RandContext(*mb.values()) if copy_random_state else None
                reps = self.model(dict(mb))["sentence_embedding"]
            with torch.no_grad():
                guide_reps = self.guide(dict(mb))["sentence_embedding"]
        return reps, guide_reps, random_state

    def embed_minibatch_iter(self, sentence_feature, with_grad, copy_random_state, random_states=None):
        bsz = sentence_feature["input_ids"].shape[0]
        for i, begin in enumerate(range(0, bsz, self.mini_batch_size)):
            yield self.embed_minibatch(sentence_feature, begin, begin + self.mini_batch_size, with_grad,
                                       copy_random_state, None if random_states is None else random_states[i])

    def calculate_loss_and_cache_gradients(self, reps, reps_guided):
        loss = self.calculate_loss(reps, reps_guided, with_backward=True)
        loss = loss.detach().requires_grad_()
        self.cache = [[r.grad for r in rs] for rs in reps]
        return loss

    def calculate_loss(self, reps, reps_guided, with_backward=False):
        anchors, anchors_guide = torch.cat(reps[0]), torch.cat(reps_guided[0])
        candidates = [torch.cat(r) for r in reps[1:]]
        candidates_guide = [torch.cat(r) for r in reps_guided[1:]]
        batch_size = anchors.size(0)
        labels = torch.arange(batch_size)
        losses = []
        for b in range(0, batch_size, self.mini_batch_size):
            e = b + self.mini_batch_size
            ap_sim = self.sim_matrix(anchors[b:e], candidates[0])
            aa_sim = self.sim_matrix(anchors[b:e], anchors)
            guided_ap_sim = self.sim_matrix(anchors_guide[b:e], candidates_guide[0])
            guided_aa_sim = self.sim_matrix(anchors_guide[b:e], anchors_guide)
            guided_sim = guided_ap_sim.diagonal(offset=b).view(-1, 1)
            ap_sim = ap_sim.masked_fill(guided_ap_sim > guided_sim, -torch.inf)
            aa_sim = aa_sim.masked_fill(guided_aa_sim > guided_sim, -torch.inf)
            scores = torch.cat([ap_sim, aa_sim], dim=1) / self.temperature
            loss_mbatch = self.cross_entropy_loss(scores, labels[b:e]) * len(scores) / batch_size
            if with_backward:
                loss_mbatch.backward()
                loss_mbatch = loss_mbatch.detach()
            losses.append(loss_mbatch)
        return sum(losses)

    def forward(self, sentence_features, labels=None):
        reps, reps_guided, self.random_states = [], [], []
        for sentence_feature in sentence_features:
            reps_mbs, reps_guided_mbs, random_state_mbs = [], [], []
            for reps_mb, guide_mb, random_state in self.embed_minibatch_iter(
                    sentence_feature, with_grad=False, copy_random_state=True):
                reps_mbs.append(reps_mb.detach().requires_grad_())
                reps_guided_mbs.append(guide_mb.detach())
                random_state_mbs.append(random_state)
            reps.append(reps_mbs)
            reps_guided.append(reps_guided_mbs)
            self.random_states.append(random_state_mbs)
        if torch.is_grad_enabled():
            loss = self.calculate_loss_and_cache_gradients(reps, reps_guided)
            loss.register_hook(partial(_backward_hook, sentence_features=sentence_features, loss_obj=self))
        else:
            loss = self.calculate_loss(reps, reps_guided)
        return loss


@dataclass
class TrainingArguments:
    num_train_epochs: int = 2
    per_device_train_batch_size: int = 8
    learning_rate: float = 5e-3
    warmup_ratio: float = 0.1
    eval_strategy: str = "epoch"
    seed: int = 12


class PrinterCallback:
    def on_log(self, state, logs):
        print("step %d: %s" % (state["global_step"], {k: round(v, 4) for k, v in logs.items()}))


class SentenceTransformerTrainer:
    def __init__(self, model, args, train_dataset, eval_dataset, loss, callbacks=None):
        self.model, self.args, self.loss = model, args, loss
        self.train_dataset, self.eval_dataset = train_dataset, eval_dataset
        self.callbacks = callbacks or [PrinterCallback()]
        self.state = {"global_step": 0}
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
        total = args.num_train_epochs * len(self.batches(train_dataset))
        warmup = max(1, int(total * args.warmup_ratio))
        self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / warmup) * max(0.0, (total - s) / total))

    def batches(self, dataset):
        bs = self.args.per_device_train_batch_size
        return [dataset[i:i + bs] for i in range(0, len(dataset), bs)]

    @staticmethod
    def collate(pairs):
        feats = []
        for col in zip(*pairs):
            ids = torch.stack([torch.as_tensor(x) for x in col])
            feats.append({"input_ids": ids, "attention_mask": (ids != 0).long()})
        return feats

    def compute_loss(self, model, inputs):
        return self.loss(inputs, labels=None)

    def training_step(self, model, inputs):
        model.train()
        loss = self.compute_loss(model, inputs)
        loss.backward()
        return loss.detach()

    def prediction_step(self, model, inputs):
        with torch.no_grad():
            loss = self.compute_loss(model, inputs)
        return loss.detach()

    def evaluate(self):
        self.model.eval()
        losses = [self.prediction_step(self.model, self.collate(b)) for b in self.batches(self.eval_dataset)]
        return {"eval_loss": float(torch.stack(losses).mean())}

    def train(self):
        for epoch in range(self.args.num_train_epochs):
            for batch in self.batches(self.train_dataset):
                loss = self.training_step(self.model, self.collate(batch))
                self.optimizer.step()
                self.lr_scheduler.step()
                self.optimizer.zero_grad()
                self.state["global_step"] += 1
                for cb in self.callbacks:
                    cb.on_log(self.state, {"loss": loss.item(), "lr": self.lr_scheduler.get_last_lr()[0]})
            if self.args.eval_strategy == "epoch":
                metrics = self.evaluate()
                for cb in self.callbacks:
                    cb.on_log(self.state, metrics)


def make_pairs(n, seq_len=12, vocab=200, seed=0):
    rng = np.random.RandomState(seed)
    pairs = []
    for _ in range(n):
        anchor = rng.randint(1, vocab, size=seq_len)
        positive = anchor.copy()
        drop = rng.rand(seq_len) < 0.3
        positive[drop] = rng.randint(1, vocab, size=drop.sum())
        anchor[rng.randint(seq_len // 2, seq_len):] = 0
        pairs.append((anchor, positive))
    return pairs


def main():
    args = TrainingArguments()
    torch.manual_seed(args.seed)
    model = TinySentenceEncoder()
    guide = TinySentenceEncoder(dropout=0.0).eval()
    guide.requires_grad_(False)
    loss = CachedGISTEmbedLoss(model, guide, mini_batch_size=4)
    trainer = SentenceTransformerTrainer(model, args, make_pairs(32), make_pairs(16, seed=1), loss)
    trainer.train()


if __name__ == "__main__":
    main()
