# expect: freed_graph
# source: https://github.com/lucidrains/rotary-embedding-torch/issues/18
"""CTC keyword recogniser with a rotary-position transformer encoder.

Trains on synthetic log-mel "utterances" where every token is rendered as a
short band-limited burst.  The encoder uses rotary position embeddings with a
per-length frequency cache, as in rotary-embedding-torch.
"""
import math
import random
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class ASRConfig:
    n_mels: int = 32
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    ff_mult: int = 2
    vocab: int = 9            # index 0 is the CTC blank
    rotary_dim: int = 8
    learned_freq: bool = False
    cache_freqs: bool = True
    trainable: str = "all"    # "head" or "all"
    lr: float = 2e-3
    weight_decay: float = 1e-2
    steps: int = 6
    batch: int = 6
    frames: int = 48
    tokens_per_utt: int = 4
    grad_clip: float = 1.0
    seed: int = 7


def exists(v):
    return v is not None


def seed_everything(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# ----------------------------------------------------------------------------
# rotary embedding helpers
# ----------------------------------------------------------------------------
def rotate_half(x):
    x = x.reshape(*x.shape[:-1], -1, 2)
    x1, x2 = x.unbind(dim=-1)
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def apply_rotary_emb(freqs, t):
    rot_dim = freqs.shape[-1]
    t_rot, t_pass = t[..., :rot_dim], t[..., rot_dim:]
    t_rot = t_rot * freqs.cos() + rotate_half(t_rot) * freqs.sin()
    return torch.cat((t_rot, t_pass), dim=-1)


class RotaryEmbedding(nn.Module):
    def __init__(self, dim, theta=10000.0, learned_freq=False, cache_if_possible=True):
        super().__init__()
        freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: dim // 2].float() / dim))
        self.freqs = nn.Parameter(freqs, requires_grad=learned_freq)
        self.learned_freq = learned_freq
        self.cache_if_possible = cache_if_possible
        self.cache = dict()

    def get_seq_pos(self, seq_len, device, dtype, offset=0):
        return torch.arange(seq_len, device=device, dtype=dtype) + offset

    def forward(self, t, cache_key=None):
        should_cache = self.cache_if_possible and not self.learned_freq and exists(cache_key)
        if should_cache and cache_key in self.cache:
            return self.cache[cache_key]
        if callable(t):
            t = t()
        freqs = torch.einsum("i,f->if", t.type(self.freqs.dtype), self.freqs)
        freqs = freqs.repeat_interleave(2, dim=-1)
        if should_cache:
            self.cache[cache_key] = freqs
        return freqs

    def rotate_queries_or_keys(self, t, offset=0):
        seq_len = t.shape[-2]
        freqs = self.forward(lambda: self.get_seq_pos(seq_len, t.device, t.dtype, offset),
                             cache_key=f"freqs:{seq_len}|offset:{offset}")
        return apply_rotary_emb(freqs, t)


# ----------------------------------------------------------------------------
# encoder
# ----------------------------------------------------------------------------
class RotaryAttention(nn.Module):
    def __init__(self, cfg, rotary):
        super().__init__()
        self.h = cfg.n_heads
        self.dh = cfg.d_model // cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.out = nn.Linear(cfg.d_model, cfg.d_model)
        self.rotary = rotary

    def forward(self, x, pad_mask):
        b, n, _ = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (z.view(b, n, self.h, self.dh).transpose(1, 2) for z in (q, k, v))
        q = self.rotary.rotate_queries_or_keys(q)
        k = self.rotary.rotate_queries_or_keys(k)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(self.dh)
        att = att.masked_fill(pad_mask[:, None, None, :], float("-inf"))
        y = att.softmax(dim=-1) @ v
        return self.out(y.transpose(1, 2).reshape(b, n, -1))


class EncoderBlock(nn.Module):
    def __init__(self, cfg, rotary):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = RotaryAttention(cfg, rotary)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.ff = nn.Sequential(nn.Linear(cfg.d_model, cfg.ff_mult * cfg.d_model), nn.GELU(),
                                nn.Linear(cfg.ff_mult * cfg.d_model, cfg.d_model))

    def forward(self, x, pad_mask):
        x = x + self.attn(self.ln1(x), pad_mask)
        return x + self.ff(self.ln2(x))


class CTCRecognizer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.frontend = nn.Sequential(nn.Conv1d(cfg.n_mels, cfg.d_model, 3, padding=1), nn.GELU(),
                                      nn.Conv1d(cfg.d_model, cfg.d_model, 3, padding=1))
        self.rotary = RotaryEmbedding(cfg.rotary_dim, learned_freq=cfg.learned_freq,
                                      cache_if_possible=cfg.cache_freqs)
        self.blocks = nn.ModuleList([EncoderBlock(cfg, self.rotary) for _ in range(cfg.n_layers)])
        self.norm = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab)

    def forward(self, feats, lengths):
        x = self.frontend(feats.transpose(1, 2)).transpose(1, 2)
        pad_mask = torch.arange(x.shape[1])[None, :] >= lengths[:, None]
        for blk in self.blocks:
            x = blk(x, pad_mask)
        return self.head(self.norm(x)).log_softmax(dim=-1)


def set_trainable(model, mode):
    """Freeze everything but the output head, or open the whole model up."""
    if mode == "head":
        for p in model.parameters():
            p.requires_grad_(False)
        for p in model.head.parameters():
            p.requires_grad_(True)
    else:
        model.requires_grad_(True)


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
class SyntheticKeywordSet:
    def __init__(self, cfg, generator):
        self.cfg = cfg
        self.g = generator
        self.templates = torch.randn(cfg.vocab, cfg.n_mels, generator=generator)

    def batch(self):
        cfg = self.cfg
        feats = 0.1 * torch.randn(cfg.batch, cfg.frames, cfg.n_mels, generator=self.g)
        targets, tgt_lens, lengths = [], [], []
        for b in range(cfg.batch):
            toks = torch.randint(1, cfg.vocab, (cfg.tokens_per_utt,), generator=self.g)
            seg = cfg.frames // (cfg.tokens_per_utt + 1)
            for j, tok in enumerate(toks.tolist()):
                start = j * seg + 2
                feats[b, start:start + seg - 3] += self.templates[tok]
            targets.append(toks)
            tgt_lens.append(len(toks))
            lengths.append(cfg.frames)
        return feats, torch.tensor(lengths), torch.cat(targets), torch.tensor(tgt_lens)


def greedy_decode(log_probs, lengths):
    hyps = []
    best = log_probs.argmax(dim=-1)
    for b in range(best.shape[0]):
        seq, prev = [], 0
        for tok in best[b, : lengths[b]].tolist():
            if tok != prev and tok != 0:
                seq.append(tok)
            prev = tok
        hyps.append(seq)
    return hyps


def train(cfg):
    seed_everything(cfg.seed)
    g = torch.Generator().manual_seed(cfg.seed)
    data = SyntheticKeywordSet(cfg, g)
    model = CTCRecognizer(cfg)
    set_trainable(model, cfg.trainable)
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() > 1]
    no_decay = [p for p in params if p.dim() <= 1]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg.lr, total_steps=cfg.steps)
    ctc = nn.CTCLoss(blank=0, zero_infinity=True)

    history = []
    for step in range(cfg.steps):
        model.train()
        feats, lengths, targets, tgt_lens = data.batch()
        log_probs = model(feats, lengths)
        loss = ctc(log_probs.transpose(0, 1), targets, lengths, tgt_lens)
        opt.zero_grad(set_to_none=True)
        loss.backward()  # raises
        torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        opt.step()
        sched.step()
        history.append(loss.item())

    model.eval()
    with torch.no_grad():
        feats, lengths, targets, tgt_lens = data.batch()
        hyps = greedy_decode(model(feats, lengths), lengths)
    return history, hyps


if __name__ == "__main__":
    cfg = ASRConfig()
    losses, hyps = train(cfg)
    print("ctc losses:", [round(l, 3) for l in losses])
    print("example hypothesis:", hyps[0])
