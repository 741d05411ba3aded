# expect: freed_graph
# source: https://github.com/meta-llama/llama-cookbook/issues/247
"""Fine-tune a tiny LLaMA-style decoder on synthetic token streams.

The attention module keeps a preallocated key/value cache so the same
module serves both teacher-forced fine-tuning and incremental decoding.
"""
import math
import time
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class ModelArgs:
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    vocab_size: int = 97
    multiple_of: int = 32
    norm_eps: float = 1e-5
    max_batch_size: int = 8
    max_seq_len: int = 32


@dataclass
class TrainArgs:
    batch_size: int = 4
    seq_len: int = 16
    steps: int = 6
    lr: float = 3e-4
    warmup: int = 2
    grad_clip: float = 1.0
    log_interval: int = 1


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        norm = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return norm * self.weight


def precompute_freqs(dim: int, end: int, theta: float = 10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: dim // 2].float() / dim))
    t = torch.arange(end).float()
    angles = torch.outer(t, freqs)
    return torch.cos(angles), torch.sin(angles)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., 0::2], x[..., 1::2]
    cos = cos[None, :, None, :]
    sin = sin[None, :, None, :]
    out1 = x1 * cos - x2 * sin
    out2 = x1 * sin + x2 * cos
    return torch.stack((out1, out2), dim=-1).flatten(-2)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.n_heads = args.n_heads
        self.head_dim = args.dim // args.n_heads
        self.wq = nn.Linear(args.dim, args.dim, bias=False)
        self.wk = nn.Linear(args.dim, args.dim, bias=False)
        self.wv = nn.Linear(args.dim, args.dim, bias=False)
        self.wo = nn.Linear(args.dim, args.dim, bias=False)
        self.cache_k = torch.zeros(args.max_batch_size, args.max_seq_len, self.n_heads, self.head_dim)
        self.cache_v = torch.zeros(args.max_batch_size, args.max_seq_len, self.n_heads, self.head_dim)

    def forward(self, x, start_pos: int, cos, sin, mask: Optional[torch.Tensor]):
        bsz, seqlen, _ = x.shape
        xq = self.wq(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xk = self.wk(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xv = self.wv(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xq = apply_rotary(xq, cos, sin)
        xk = apply_rotary(xk, cos, sin)

        self.cache_k = self.cache_k.to(xq)
        self.cache_v = self.cache_v.to(xq)
        self.cache_k[:bsz, start_pos: start_pos + seqlen] = xk
        self.cache_v[:bsz, start_pos: start_pos + seqlen] = xv
        keys = self.cache_k[:bsz, : start_pos + seqlen]
        values = self.cache_v[:bsz, : start_pos + seqlen]

        q = xq.transpose(1, 2)
        k = keys.transpose(1, 2)
        v = values.transpose(1, 2)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores + mask
        probs = F.softmax(scores.float(), dim=-1).type_as(q)
        out = torch.matmul(probs, v).transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.wo(out)


class FeedForward(nn.Module):
    def __init__(self, dim: int, multiple_of: int):
        super().__init__()
        hidden = int(2 * (4 * dim) / 3)
        hidden = multiple_of * ((hidden + multiple_of - 1) // multiple_of)
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, layer_id: int, args: ModelArgs):
        super().__init__()
        self.layer_id = layer_id
        self.attention = Attention(args)
        self.feed_forward = FeedForward(args.dim, args.multiple_of)
        self.attention_norm = RMSNorm(args.dim, eps=args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, eps=args.norm_eps)

    def forward(self, x, start_pos, cos, sin, mask):
        h = x + self.attention(self.attention_norm(x), start_pos, cos, sin, mask)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, params: ModelArgs):
        super().__init__()
        self.params = params
        self.tok_embeddings = nn.Embedding(params.vocab_size, params.dim)
        self.layers = nn.ModuleList(TransformerBlock(i, params) for i in range(params.n_layers))
        self.norm = RMSNorm(params.dim, eps=params.norm_eps)
        self.output = nn.Linear(params.dim, params.vocab_size, bias=False)
        cos, sin = precompute_freqs(params.dim // params.n_heads, params.max_seq_len * 2)
        self.register_buffer("freqs_cos", cos, persistent=False)
        self.register_buffer("freqs_sin", sin, persistent=False)

    def forward(self, tokens: torch.Tensor, start_pos: int = 0):
        _bsz, seqlen = tokens.shape
        h = self.tok_embeddings(tokens)
        cos = self.freqs_cos[start_pos: start_pos + seqlen]
        sin = self.freqs_sin[start_pos: start_pos + seqlen]
        mask = None
        if seqlen > 1:
            mask = torch.full((seqlen, seqlen), float("-inf"), device=tokens.device)
            mask = torch.triu(mask, diagonal=1)
            mask = torch.hstack([torch.zeros((seqlen, start_pos)), mask])
        for layer in self.layers:
            h = layer(h, start_pos, cos, sin, mask)
        return self.output(self.norm(h)).float()


def synthetic_batches(args: ModelArgs, targs: TrainArgs):
    g = torch.Generator().manual_seed(0)
    for _ in range(targs.steps):
        start = torch.randint(0, args.vocab_size, (targs.batch_size, 1), generator=g)
        stride = torch.randint(1, 5, (targs.batch_size, 1), generator=g)
        seq = (start + stride * torch.arange(targs.seq_len + 1)) % args.vocab_size
        yield seq[:, :-1], seq[:, 1:]


def lr_at(step: int, targs: TrainArgs) -> float:
    if step < targs.warmup:
        return targs.lr * (step + 1) / targs.warmup
    progress = (step - targs.warmup) / max(1, targs.steps - targs.warmup)
    return targs.lr * 0.5 * (1.0 + math.cos(math.pi * progress))


@torch.no_grad()
def greedy_generate(model: Transformer, prompt: torch.Tensor, max_new: int) -> torch.Tensor:
    tokens = prompt
    logits = model(tokens, start_pos=0)
    for i in range(max_new):
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, nxt], dim=1)
        logits = model(nxt, start_pos=tokens.shape[1] - 1)
    return tokens


def finetune(model: Transformer, args: ModelArgs, targs: TrainArgs):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=targs.lr, betas=(0.9, 0.95))
    model.train()
    t0 = time.time()
    for step, (inputs, labels) in enumerate(synthetic_batches(args, targs)):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, targs)
        logits = model(inputs, start_pos=0)
        loss = F.cross_entropy(logits.reshape(-1, args.vocab_size), labels.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # raises
        torch.nn.utils.clip_grad_norm_(model.parameters(), targs.grad_clip)
        optimizer.step()
        if step % targs.log_interval == 0:
            print(f"step {step:3d} | loss {loss.item():.4f} | lr {lr_at(step, targs):.2e} "
                  f"| {time.time() - t0:.2f}s")


def main():
    torch.manual_seed(0)
    args, targs = ModelArgs(), TrainArgs()
    model = Transformer(args)
    finetune(model, args, targs)
    model.eval()
    out = greedy_generate(model, torch.tensor([[3, 5, 7, 9]]), max_new=6)
    print("sample:", out.tolist())


if __name__ == "__main__":
    main()
