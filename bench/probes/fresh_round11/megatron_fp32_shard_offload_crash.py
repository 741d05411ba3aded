# expect: nonleaf_optimizer
# source: https://github.com/NVIDIA/Megatron-LM/pull/7013
"""Megatron-style distributed optimizer for a mixed-precision model: every
parameter is flattened into a contiguous grad buffer and this rank owns a
range of it.  For bf16/fp16 params an fp32 main copy of the shard is created;
params kept in fp32 are optimized through a shard view directly.  With CPU
optimizer offload the shards are handed to a HybridDeviceOptimizer that wraps
a plain torch.optim optimizer."""
from dataclasses import dataclass

import torch
import torch.nn as nn

torch.manual_seed(0)


@dataclass
class OptimizerConfig:
    lr: float = 1e-3
    weight_decay: float = 0.01
    params_dtype: torch.dtype = torch.bfloat16
    use_distributed_optimizer: bool = True
    optimizer_cpu_offload: bool = True
    world_size: int = 2
    rank: int = 0


def mark_keep_in_fp32(param):
    param.keep_in_fp32 = True
    return param


class TinyAttention(nn.Module):
    """Attention block with a learned sink kept in fp32 (like `attn_sink`/`ape`)."""

    def __init__(self, hidden):
        super().__init__()
        self.qkv = nn.Linear(hidden, 3 * hidden, bias=False)
        self.proj = nn.Linear(hidden, hidden, bias=False)
        self.attn_sink = mark_keep_in_fp32(nn.Parameter(torch.zeros(4, hidden)))

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        sink = self.attn_sink.to(x.dtype).mean(0)
        att = torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, dim=-1)
        return self.proj(att @ v + sink)


class TinyGPT(nn.Module):
    def __init__(self, vocab=64, hidden=32, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.blocks = nn.ModuleList(TinyAttention(hidden) for _ in range(layers))
        self.head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, tokens):
        h = self.embed(tokens)
        for blk in self.blocks:
            h = h + blk(h)
        return self.head(h)


def to_mixed_precision(model, dtype):
    for p in model.parameters():
        if not getattr(p, "keep_in_fp32", False):
            p.data = p.data.to(dtype)
    return model


class Range:
    def __init__(self, start, end):
        self.start, self.end = start, end
        self.size = end - start


def build_param_ranges(params, world_size, rank):
    """Split the flattened buffer evenly and return the local range of each param."""
    total = sum(p.numel() for p in params)
    shard = (total + world_size - 1) // world_size
    lo, hi = rank * shard, min(total, (rank + 1) * shard)
    ranges, offset = {}, 0
    for p in params:
        p_lo, p_hi = offset, offset + p.numel()
        s, e = max(lo, p_lo), min(hi, p_hi)
        if s < e:
            ranges[p] = Range(s - p_lo, e - p_lo)
        offset = p_hi
    return ranges


class HybridDeviceOptimizer:
    """Keeps optimizer states on the host; wraps a torch optimizer."""

    def __init__(self, params, cfg):
        self.cpu_params = list(params)
        self.optimizer = torch.optim.AdamW(self.cpu_params, lr=cfg.lr,  # raises
                                           weight_decay=cfg.weight_decay)

    def zero_grad(self):
        self.optimizer.zero_grad(set_to_none=True)

    def step(self):
        self.optimizer.step()


class DistributedOptimizer:
    def __init__(self, model, cfg):
        self.cfg = cfg
        self.model_params = [p for p in model.parameters() if p.requires_grad]
        self.param_ranges = build_param_ranges(self.model_params, cfg.world_size, cfg.rank)
        self.shard_groups = self._build_model_and_main_param_groups()
        if cfg.optimizer_cpu_offload:
            self.optimizer = HybridDeviceOptimizer(self.shard_groups["main"], cfg)
        else:
            self.optimizer = torch.optim.AdamW(self.shard_groups["main"], lr=cfg.lr)

    def _build_model_and_main_param_groups(self):
        model_shards, main_shards, pairs = [], [], []
        for model_param in self.model_params:
            if model_param not in self.param_ranges:
                continue
            param_range = self.param_ranges[model_param]
            assert model_param.requires_grad
            if model_param.dtype in (torch.float16, torch.bfloat16):
                shard_model_param = model_param.detach().view(-1)[param_range.start:param_range.end]
                shard_main_param = shard_model_param.clone().float()
                pairs.append((shard_model_param, shard_main_param, model_param, param_range))
            elif model_param.dtype == torch.float32:
                shard_model_param = model_param.view(-1)[param_range.start:param_range.end]
                shard_main_param = shard_model_param
                pairs.append((shard_model_param, shard_main_param, model_param, param_range))
            else:
                raise TypeError(f"unsupported dtype {model_param.dtype}")
            model_shards.append(shard_model_param)
            main_shards.append(shard_main_param)
        self.pairs = pairs
        return {"model": model_shards, "main": main_shards}

    def zero_grad(self):
        self.optimizer.zero_grad()
        for p in self.model_params:
            p.grad = None

    def step(self):
        # copy model grads into the main-param shards, step, copy params back
        for shard_model, shard_main, model_param, rng in self.pairs:
            if model_param.grad is None:
                continue
            shard_main.grad = model_param.grad.view(-1)[rng.start:rng.end].float().clone()
        self.optimizer.step()
        with torch.no_grad():
            for shard_model, shard_main, model_param, rng in self.pairs:
                if shard_model is not shard_main:
                    shard_model.copy_(shard_main.to(shard_model.dtype))


def train(cfg, steps=4):
    model = to_mixed_precision(TinyGPT(), cfg.params_dtype)
    optimizer = DistributedOptimizer(model, cfg)
    tokens = torch.randint(0, 64, (4, 12))
    for it in range(steps):
        logits = model(tokens[:, :-1])
        loss = nn.functional.cross_entropy(logits.float().reshape(-1, 64), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"iter {it}: lm loss {loss.item():.4f}")


if __name__ == "__main__":
    train(OptimizerConfig())
