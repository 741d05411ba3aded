# expect: freed_graph
# source: https://github.com/exiawsh/StreamPETR/issues/63
"""Transformer-XL style language model with segment-level recurrence.

A small word-level LM trained on a synthetic token stream.  Hidden states of
the previous segment are cached per layer ("mems") and prepended to the keys
and values of the next segment, as in Dai et al. (2019).
"""
import math
import time
from dataclasses import dataclass, field
from typing import List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class ModelConfig:
    n_token: int = 64
    n_layer: int = 2
    n_head: int = 2
    d_model: int = 32
    d_head: int = 16
    d_inner: int = 64
    dropout: float = 0.1
    tgt_len: int = 8
    mem_len: int = 8


@dataclass
class TrainConfig:
    batch_size: int = 4
    max_step: int = 6
    lr: float = 2.5e-3
    clip: float = 0.25
    warmup_step: int = 2
    log_interval: int = 2
    seed: int = 1111
    model: ModelConfig = field(default_factory=ModelConfig)


class LMOrderedIterator:
    """Cuts a long token stream into contiguous [tgt_len, bsz] segments."""

    def __init__(self, data: torch.Tensor, bsz: int, bptt: int):
        self.bsz = bsz
        self.bptt = bptt
        n_step = data.size(0) // bsz
        self.data = data[: n_step * bsz].view(bsz, -1).t().contiguous()
        self.n_batch = (self.data.size(0) + bptt - 1) // bptt

    def __iter__(self):
        for i in range(0, self.data.size(0) - 1, self.bptt):
            seq_len = min(self.bptt, self.data.size(0) - 1 - i)
            yield self.data[i:i + seq_len], self.data[i + 1:i + 1 + seq_len], seq_len


class PositionalEmbedding(nn.Module):
    def __init__(self, demb: int):
        super().__init__()
        inv_freq = 1 / (10000 ** (torch.arange(0.0, demb, 2.0) / demb))
        self.register_buffer("inv_freq", inv_freq)

    def forward(self, pos_seq: torch.Tensor) -> torch.Tensor:
        sinusoid = torch.ger(pos_seq, self.inv_freq)
        return torch.cat([sinusoid.sin(), sinusoid.cos()], dim=-1)[:, None, :]


class MultiHeadAttn(nn.Module):
    def __init__(self, n_head, d_model, d_head, dropout):
        super().__init__()
        self.n_head, self.d_head = n_head, d_head
        self.q_net = nn.Linear(d_model, n_head * d_head, bias=False)
        self.kv_net = nn.Linear(d_model, 2 * n_head * d_head, bias=False)
        self.o_net = nn.Linear(n_head * d_head, d_model, bias=False)
        self.drop = nn.Dropout(dropout)
        self.layer_norm = nn.LayerNorm(d_model)
        self.scale = 1 / math.sqrt(d_head)

    def forward(self, h, attn_mask, mems=None):
        c = torch.cat([mems, h], 0) if mems is not None else h
        qlen, klen, bsz = h.size(0), c.size(0), h.size(1)
        q = self.q_net(h).view(qlen, bsz, self.n_head, self.d_head)
        k, v = torch.chunk(self.kv_net(c), 2, -1)
        k = k.view(klen, bsz, self.n_head, self.d_head)
        v = v.view(klen, bsz, self.n_head, self.d_head)
        score = torch.einsum("ibnd,jbnd->ijbn", q, k) * self.scale
        score = score.masked_fill(attn_mask[:, :, None, None], -1e30)
        prob = self.drop(F.softmax(score, dim=1))
        vec = torch.einsum("ijbn,jbnd->ibnd", prob, v).reshape(qlen, bsz, -1)
        return self.layer_norm(h + self.drop(self.o_net(vec)))


class PositionwiseFF(nn.Module):
    def __init__(self, d_model, d_inner, dropout):
        super().__init__()
        self.core = nn.Sequential(
            nn.Linear(d_model, d_inner), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(d_inner, d_model), nn.Dropout(dropout))
        self.layer_norm = nn.LayerNorm(d_model)

    def forward(self, x):
        return self.layer_norm(x + self.core(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attn = MultiHeadAttn(cfg.n_head, cfg.d_model, cfg.d_head, cfg.dropout)
        self.ff = PositionwiseFF(cfg.d_model, cfg.d_inner, cfg.dropout)

    def forward(self, h, attn_mask, mems=None):
        return self.ff(self.attn(h, attn_mask, mems))


class MemTransformerLM(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.word_emb = nn.Embedding(cfg.n_token, cfg.d_model)
        self.pos_emb = PositionalEmbedding(cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList([DecoderLayer(cfg) for _ in range(cfg.n_layer)])
        self.out = nn.Linear(cfg.d_model, cfg.n_token)

    def init_mems(self) -> List[torch.Tensor]:
        return [torch.empty(0) for _ in range(self.cfg.n_layer + 1)]

    def _update_mems(self, hids, mems, qlen, mlen):
        if mems is None:
            return None
        new_mems = []
        end_idx = mlen + max(0, qlen)
        beg_idx = max(0, end_idx - self.cfg.mem_len)
        for i in range(len(hids)):
            cat = torch.cat([mems[i], hids[i]], dim=0) if mems[i].numel() else hids[i]
            new_mems.append(cat[beg_idx:end_idx])
        return new_mems

    def _forward(self, dec_inp, mems):
        qlen, bsz = dec_inp.size()
        mlen = mems[0].size(0) if mems[0].numel() else 0
        klen = mlen + qlen
        word_emb = self.word_emb(dec_inp)
        attn_mask = torch.triu(torch.ones(qlen, klen, dtype=torch.bool), diagonal=1 + mlen)
        pos_seq = torch.arange(klen - 1, -1, -1.0)[-qlen:]
        core_out = self.drop(word_emb + self.pos_emb(pos_seq))
        hids = [core_out]
        for i, layer in enumerate(self.layers):
            mems_i = mems[i] if mems[i].numel() else None
            core_out = layer(core_out, attn_mask, mems=mems_i)
            hids.append(core_out)
        new_mems = self._update_mems(hids, mems, qlen, mlen)
        return self.drop(core_out), new_mems

    def forward(self, data, target, *mems):
        if not mems:
            mems = self.init_mems()
        hidden, new_mems = self._forward(data, mems)
        logits = self.out(hidden)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), target.reshape(-1))
        return [loss] + new_mems


class Trainer:
    def __init__(self, cfg: TrainConfig):
        torch.manual_seed(cfg.seed)
        self.cfg = cfg
        self.model = MemTransformerLM(cfg.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.lr)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / cfg.warmup_step))
        stream = torch.randint(0, cfg.model.n_token, (cfg.batch_size * 80,))
        self.tr_iter = LMOrderedIterator(stream, cfg.batch_size, cfg.model.tgt_len)
        self.train_step = 0
        self.history = []

    def train_epoch(self):
        self.model.train()
        mems = tuple()
        log_start = time.time()
        for batch, (data, target, seq_len) in enumerate(self.tr_iter):
            self.model.zero_grad()
            ret = self.model(data, target, *mems)
            loss, mems = ret[0], ret[1:]
            loss.backward()  # raises
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip)
            self.optimizer.step()
            self.scheduler.step()
            self.train_step += 1
            self.history.append(loss.item())
            if self.train_step % self.cfg.log_interval == 0:
                elapsed = (time.time() - log_start) * 1000 / self.cfg.log_interval
                avg = sum(self.history[-self.cfg.log_interval:]) / self.cfg.log_interval
                print(f"| step {self.train_step:>4d} | ms/batch {elapsed:6.1f} "
                      f"| loss {avg:5.2f} | ppl {math.exp(avg):8.2f}")
                log_start = time.time()
            if self.train_step >= self.cfg.max_step:
                break


def main():
    cfg = TrainConfig()
    trainer = Trainer(cfg)
    trainer.train_epoch()
    print("done, final loss %.3f" % trainer.history[-1])


if __name__ == "__main__":
    main()
