# expect: freed_graph
# source: https://github.com/jlamprou/Infini-Attention/issues/3
"""Infini-attention language model trained segment by segment.

Each attention layer keeps a compressive memory (M, z) per head that is read with
a linear-attention retrieval and written with the delta rule after every segment.
Long sequences are split into fixed-length segments; the loss of every segment is
back-propagated immediately (gradient accumulation over segments) and the
optimizer steps once per sequence.
"""
import math
import time
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class InfiniConfig:
    vocab_size: int = 48
    d_model: int = 32
    n_heads: int = 2
    n_layers: int = 2
    d_ff: int = 64
    segment_len: int = 16
    n_segments: int = 4
    batch_size: int = 4
    lr: float = 3e-4
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    steps: int = 3
    delta_rule: bool = True
    seed: int = 0
    log_every: int = 1
    extra: dict = field(default_factory=lambda: {"dropout": 0.0})


def elu_plus_one(x):
    return F.elu(x) + 1.0


class InfiniAttention(nn.Module):
    def __init__(self, cfg: InfiniConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.d_head = cfg.d_model // cfg.n_heads
        self.delta_rule = cfg.delta_rule
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.out = nn.Linear(cfg.d_model, cfg.d_model)
        self.beta = nn.Parameter(torch.zeros(1, cfg.n_heads, 1, 1))
        self.M = None
        self.z = None

    def reset_memory(self, batch_size):
        self.M = torch.zeros(batch_size, self.n_heads, self.d_head, self.d_head)
        self.z = torch.full((batch_size, self.n_heads, self.d_head, 1), 1e-6)

    def _retrieve(self, q):
        sq = elu_plus_one(q)
        num = sq @ self.M
        den = sq @ self.z
        return num / den.clamp_min(1e-6)

    def _update_memory(self, k, v):
        sk = elu_plus_one(k)
        if self.delta_rule:
            retrieved = (sk @ self.M) / (sk @ self.z).clamp_min(1e-6)
            new_M = self.M + sk.transpose(-2, -1) @ (v - retrieved)
        else:
            new_M = self.M + sk.transpose(-2, -1) @ v
        new_z = self.z + sk.sum(dim=-2, keepdim=True).transpose(-2, -1)
        self.M = new_M
        self.z = new_z

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.n_heads, self.d_head).transpose(1, 2) for t in (q, k, v))
        a_mem = self._retrieve(q)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.d_head)
        causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        scores = scores.masked_fill(causal, float("-inf"))
        a_dot = F.softmax(scores, dim=-1) @ v
        gate = torch.sigmoid(self.beta)
        attn = gate * a_mem + (1 - gate) * a_dot
        self._update_memory(k, v)
        attn = attn.transpose(1, 2).contiguous().view(B, T, C)
        return self.out(attn)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = InfiniAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_ff), nn.GELU(), nn.Linear(cfg.d_ff, cfg.d_model))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        return x


class InfiniTransformerLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.segment_len, cfg.d_model)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layers)])
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def reset_memory(self, batch_size):
        for blk in self.blocks:
            blk.attn.reset_memory(batch_size)

    def forward(self, idx):
        T = idx.size(1)
        h = self.tok(idx) + self.pos(torch.arange(T))
        for blk in self.blocks:
            h = blk(h)
        return self.head(self.ln_f(h))


def make_long_sequences(cfg, n_seqs, generator):
    """Sequences with a long-range copy dependency: a key token reappears later."""
    total = cfg.segment_len * cfg.n_segments + 1
    seqs = torch.randint(2, cfg.vocab_size, (n_seqs, total), generator=generator)
    keys = torch.randint(2, cfg.vocab_size, (n_seqs,), generator=generator)
    seqs[:, 0] = 1
    seqs[:, 1] = keys
    seqs[:, -2] = 1
    seqs[:, -1] = keys
    return seqs


class SegmentTrainer:
    def __init__(self, cfg: InfiniConfig):
        self.cfg = cfg
        self.model = InfiniTransformerLM(cfg)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.history = []

    def iter_segments(self, seqs):
        L = self.cfg.segment_len
        for s in range(self.cfg.n_segments):
            chunk = seqs[:, s * L: (s + 1) * L + 1]
            yield chunk[:, :-1], chunk[:, 1:]

    def train_step(self, seqs):
        self.model.train()
        self.model.reset_memory(seqs.size(0))
        self.opt.zero_grad(set_to_none=True)
        seg_losses = []
        for inputs, targets in self.iter_segments(seqs):
            logits = self.model(inputs)
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
            (loss / self.cfg.n_segments).backward()  # raises
            seg_losses.append(loss.item())
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
        self.opt.step()
        return sum(seg_losses) / len(seg_losses)

    def fit(self):
        g = torch.Generator().manual_seed(self.cfg.seed)
        for step in range(1, self.cfg.steps + 1):
            t0 = time.time()
            seqs = make_long_sequences(self.cfg, self.cfg.batch_size, g)
            loss = self.train_step(seqs)
            self.history.append(loss)
            if step % self.cfg.log_every == 0:
                print(f"step {step:3d} | loss {loss:.4f} | ppl {math.exp(loss):7.2f} | {time.time() - t0:.2f}s")
        return self.history


def main():
    cfg = InfiniConfig()
    torch.manual_seed(cfg.seed)
    trainer = SegmentTrainer(cfg)
    trainer.fit()


if __name__ == "__main__":
    main()
