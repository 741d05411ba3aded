# expect: clean
# source: https://github.com/HLTCHKUST/PAML/issues/18
"""Persona-agnostic meta-learning (PAML) for a personalized dialogue model.

Mirrors the layout of HLTCHKUST/PAML: a seq2seq dialogue model with its own
train_one_batch (inner optimizer), and a MAML.py-style outer loop that adapts
the model to each persona's dialogues, measures the adapted model on the
persona's validation dialogues, restores the original weights and takes a meta
step with the summed validation loss. Tiny GRU encoder-decoder with attention,
synthetic seeded personas.
"""
import copy
import random
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

config = SimpleNamespace(
    vocab=30, emb_dim=16, hidden_dim=24, max_len=7, batch_size=4,
    lr=1e-2, meta_lr=1e-3, meta_iteration=2, meta_batch_size=3,
    epochs=2, num_personas=6, fix_dialnum_train=True, seed=0, PAD_idx=0, SOS_idx=1,
)


class Encoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embedding = nn.Embedding(cfg.vocab, cfg.emb_dim, padding_idx=cfg.PAD_idx)
        self.rnn = nn.GRU(cfg.emb_dim, cfg.hidden_dim, batch_first=True)

    def forward(self, src):
        out, h = self.rnn(self.embedding(src))
        return out, h


class AttnDecoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embedding = nn.Embedding(cfg.vocab, cfg.emb_dim, padding_idx=cfg.PAD_idx)
        self.rnn = nn.GRU(cfg.emb_dim + cfg.hidden_dim, cfg.hidden_dim, batch_first=True)
        self.attn = nn.Linear(cfg.hidden_dim * 2, 1)
        self.out = nn.Linear(cfg.hidden_dim * 2, cfg.vocab)

    def step(self, tok, h, enc_out):
        q = h[-1].unsqueeze(1).expand_as(enc_out)
        score = self.attn(torch.cat([q, enc_out], -1)).squeeze(-1)
        ctx = torch.bmm(torch.softmax(score, -1).unsqueeze(1), enc_out)
        out, h = self.rnn(torch.cat([self.embedding(tok).unsqueeze(1), ctx], -1), h)
        return self.out(torch.cat([out, ctx], -1)).squeeze(1), h


class Seq2SPG(nn.Module):
    """Dialogue generator; owns its inner-loop optimizer like PAML's Transformer."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.encoder = Encoder(cfg)
        self.decoder = AttnDecoder(cfg)
        self.optimizer = torch.optim.SGD(self.parameters(), lr=cfg.lr)

    def compute_loss(self, batch):
        src, tgt = batch["input_batch"], batch["target_batch"]
        enc_out, h = self.encoder(src)
        tok = torch.full((src.size(0),), self.cfg.SOS_idx, dtype=torch.long)
        losses = []
        for t in range(tgt.size(1)):
            logits, h = self.decoder.step(tok, h, enc_out)
            losses.append(F.cross_entropy(logits, tgt[:, t], ignore_index=self.cfg.PAD_idx))
            tok = tgt[:, t]
        return torch.stack(losses).mean()

    def train_one_batch(self, batch, train=True):
        loss = self.compute_loss(batch)
        if train:
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
        return loss, math_ppl(loss)


def math_ppl(loss):
    return float(np.exp(min(loss.item(), 50)))


def make_persona_data(cfg):
    rng = random.Random(cfg.seed)
    g = torch.Generator().manual_seed(cfg.seed)
    personas = {}
    for pid in range(cfg.num_personas):
        shift = rng.randint(2, cfg.vocab - 2)

        def batch(shift=shift):
            src = torch.randint(2, cfg.vocab, (cfg.batch_size, cfg.max_len), generator=g)
            tgt = (src + shift) % (cfg.vocab - 2) + 2
            return {"input_batch": src, "target_batch": tgt}

        personas[pid] = {"train": [batch(), batch()], "valid": [batch()]}
    return personas


def do_learning(model, train_iter, iterations):
    # inner loop: adapt the model to one persona
    for _ in range(iterations):
        for batch in train_iter:
            model.train_one_batch(batch)


def do_evaluation(model, data):
    with torch.no_grad():
        losses = [model.train_one_batch(b, train=False)[0].item() for b in data]
    return float(np.mean(losses))


class MetaTrainer:
    def __init__(self, model, personas, cfg):
        self.meta_net = model
        self.personas = personas
        self.cfg = cfg
        self.meta_optimizer = torch.optim.Adam(self.meta_net.parameters(), lr=cfg.meta_lr)
        self.history = []

    def meta_step(self, persona_ids):
        weights_original = copy.deepcopy(self.meta_net.state_dict())
        val_loss_meta, val_ppl_meta = [], []
        params = list(self.meta_net.parameters())
        meta_grads = [torch.zeros_like(p) for p in params]
        for pid in persona_ids:
            do_learning(self.meta_net, self.personas[pid]["train"], self.cfg.meta_iteration)
            val_loss, val_ppl = self.meta_net.train_one_batch(self.personas[pid]["valid"][0], train=False)
            # first-order meta-gradient, taken before the weights are reset
            grads = torch.autograd.grad(val_loss, params)
            meta_grads = [mg + g for mg, g in zip(meta_grads, grads)]
            val_loss_meta.append(val_loss.detach())
            val_ppl_meta.append(val_ppl)
            # reset to the original weights before the next persona
            self.meta_net.load_state_dict({name: weights_original[name] for name in weights_original})
        self.meta_optimizer.zero_grad()
        batch_loss = torch.sum(torch.stack(val_loss_meta))
        for p, g in zip(params, meta_grads):
            p.grad = g
        self.meta_optimizer.step()
        return batch_loss.item() / len(persona_ids), float(np.mean(val_ppl_meta))

    def fit(self):
        ids = list(self.personas)
        rng = random.Random(self.cfg.seed)
        for epoch in range(self.cfg.epochs):
            rng.shuffle(ids)
            for i in range(0, len(ids), self.cfg.meta_batch_size):
                loss, ppl = self.meta_step(ids[i:i + self.cfg.meta_batch_size])
                self.history.append(loss)
            val = np.mean([do_evaluation(self.meta_net, p["valid"]) for p in self.personas.values()])
            print(f"epoch {epoch} meta-loss {np.mean(self.history):.3f} valid {val:.3f}")


def main():
    torch.manual_seed(config.seed)
    model = Seq2SPG(config)
    personas = make_persona_data(config)
    MetaTrainer(model, personas, config).fit()


if __name__ == "__main__":
    main()
