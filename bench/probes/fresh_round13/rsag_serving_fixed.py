# expect: clean
# source: https://github.com/lightseekorg/tokenspeed/pull/794
"""MoE serving worker with a token reduce-scatter/all-gather (RSAG) path.

Single-process simulation of a data-parallel attention + tensor-parallel
MoE serving engine.  The RSAG communication state lazily allocates a
persistent "symmetric memory" buffer the first time it is used and reuses
it for every later reduce-scatter.  Startup captures the decode graphs;
afterwards the server's generation warmup drives IDLE data-parallel ranks
through the same forward.
"""
import enum
from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class ServerConfig:
    hidden_size: int = 32
    num_experts: int = 4
    top_k: int = 2
    tp_size: int = 2
    dp_size: int = 2
    max_tokens: int = 16
    warmup_batch_sizes: tuple = (1, 2, 4)
    seed: int = 0


class ForwardMode(enum.Enum):
    DECODE = "decode"
    IDLE = "idle"


def alloc_symm_buffer(shape, dtype, device):
    """Symmetric-memory allocation helper (plain torch.empty on CPU)."""
    return torch.empty(shape, dtype=dtype, device=device)


def alloc_symm_buffer_outside_inference(shape, dtype, device):
    with torch.inference_mode(False):
        return alloc_symm_buffer(shape, dtype, device)


class RSAGState:
    """Lazily-created communication buffer shared across forward passes."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.buffer = None
        self.num_allocs = 0

    def get_buffer(self, hidden, dtype, device):
        if self.buffer is None:
            shape = (self.cfg.tp_size, self.cfg.max_tokens, hidden)
            self.buffer = alloc_symm_buffer_outside_inference(shape, dtype, device)
            self.num_allocs += 1
        return self.buffer

    def reduce_scatter(self, x):
        buf = self.get_buffer(x.shape[-1], x.dtype, x.device)
        n = x.shape[0]
        for rank in range(self.cfg.tp_size):
            buf[rank, :n].copy_(x / self.cfg.tp_size)
        return buf[:, :n].sum(0)


class MoELayer(nn.Module):
    def __init__(self, cfg, comm):
        super().__init__()
        self.cfg, self.comm = cfg, comm
        self.gate = nn.Linear(cfg.hidden_size, cfg.num_experts, bias=False)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(cfg.hidden_size, 2 * cfg.hidden_size), nn.SiLU(),
                          nn.Linear(2 * cfg.hidden_size, cfg.hidden_size))
            for _ in range(cfg.num_experts))

    def forward(self, x):
        scores = self.gate(x).softmax(-1)
        weights, idx = scores.topk(self.cfg.top_k, dim=-1)
        out = torch.zeros_like(x)
        for k in range(self.cfg.top_k):
            for e, expert in enumerate(self.experts):
                sel = idx[:, k] == e
                if sel.any():
                    out[sel] += weights[sel, k:k + 1] * expert(x[sel])
        return self.comm.reduce_scatter(out)


class DecoderModel(nn.Module):
    def __init__(self, cfg, comm):
        super().__init__()
        self.embed = nn.Embedding(100, cfg.hidden_size)
        self.attn_proj = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.moe = MoELayer(cfg, comm)
        self.lm_head = nn.Linear(cfg.hidden_size, 100, bias=False)

    def forward(self, input_ids, mode):
        if mode is ForwardMode.IDLE:
            h = torch.zeros(1, self.embed.embedding_dim)
        else:
            h = self.attn_proj(self.embed(input_ids))
        h = h + self.moe(h)
        return self.lm_head(h)


class ModelRunner:
    def __init__(self, cfg):
        torch.manual_seed(cfg.seed)
        self.cfg = cfg
        self.comm = RSAGState(cfg)
        self.model = DecoderModel(cfg, self.comm).eval()
        self.captured = {}

    @torch.inference_mode()
    def capture_decode_graphs(self):
        for bs in self.cfg.warmup_batch_sizes:
            ids = torch.randint(0, 100, (bs,))
            self.captured[bs] = self.model(ids, ForwardMode.DECODE).shape

    def forward(self, input_ids, mode):
        return self.model(input_ids, mode)


class Scheduler:
    def __init__(self, cfg, runner):
        self.cfg, self.runner = cfg, runner

    def assign_modes(self, num_requests):
        return [ForwardMode.DECODE if r < num_requests else ForwardMode.IDLE
                for r in range(self.cfg.dp_size)]

    def generation_warmup(self):
        outs = []
        with torch.no_grad():
            for mode in self.assign_modes(num_requests=1):
                ids = torch.randint(0, 100, (2,))
                outs.append(self.runner.forward(ids, mode).argmax(-1))
        return outs


def main():
    cfg = ServerConfig()
    runner = ModelRunner(cfg)
    runner.capture_decode_graphs()
    print("captured batch sizes:", sorted(runner.captured))
    sched = Scheduler(cfg, runner)
    tokens = sched.generation_warmup()
    print("warmup tokens:", [t.tolist() for t in tokens], "buffer allocs:", runner.comm.num_allocs)


if __name__ == "__main__":
    main()
