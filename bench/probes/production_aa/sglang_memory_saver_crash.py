# expect: inference_tensor
# source: https://github.com/sgl-project/sglang/pull/21035
"""Miniature of an SGLang-style serving engine with sleep/wake (memory saver) support.

A small Llama-like decoder with rotary embeddings is served by a ModelRunner.  On
newer device capabilities the runner performs its warm-up forward under
inference mode.  The engine can release its memory occupation (exporting the
static buffers of the model), resume it (importing them back), reload weights
and keep serving requests.  Everything runs on CPU with synthetic weights.
"""
import contextlib
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class ServerArgs:
    vocab_size: int = 256
    hidden_size: int = 64
    num_heads: int = 4
    num_layers: int = 2
    intermediate_size: int = 128
    max_position_embeddings: int = 128
    rope_theta: float = 10000.0
    dtype: torch.dtype = torch.bfloat16
    device_capability: tuple = (10, 0)
    enable_memory_saver: bool = True
    max_new_tokens: int = 6
    seed: int = 0
    warmup_batch: List[int] = field(default_factory=lambda: [1, 2])


# ----------------------------------------------------------------------------- layers
class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + self.eps)).to(x.dtype) * self.weight


class RotaryEmbedding(nn.Module):
    def __init__(self, head_dim: int, max_position: int, base: float):
        super().__init__()
        self.head_dim = head_dim
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        t = torch.arange(max_position, dtype=torch.float32)
        freqs = torch.einsum("i,j->ij", t, inv_freq)
        cache = torch.cat((freqs.cos(), freqs.sin()), dim=-1)
        self.register_buffer("cos_sin_cache", cache, persistent=False)

    def _match_cos_sin_cache_dtype(self, query: torch.Tensor) -> None:
        if self.cos_sin_cache.dtype != query.dtype:
            self.cos_sin_cache = self.cos_sin_cache.to(query.dtype)

    def forward(self, positions, query, key):
        self._match_cos_sin_cache_dtype(query)
        cos_sin = self.cos_sin_cache.index_select(0, positions)
        cos, sin = cos_sin.chunk(2, dim=-1)
        cos = cos.unsqueeze(-2)
        sin = sin.unsqueeze(-2)

        def rotate(x):
            x1, x2 = x[..., : self.head_dim // 2], x[..., self.head_dim // 2:]
            return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

        return rotate(query), rotate(key)


class LlamaAttention(nn.Module):
    def __init__(self, args: ServerArgs):
        super().__init__()
        self.num_heads = args.num_heads
        self.head_dim = args.hidden_size // args.num_heads
        self.qkv_proj = nn.Linear(args.hidden_size, 3 * args.hidden_size, bias=False)
        self.o_proj = nn.Linear(args.hidden_size, args.hidden_size, bias=False)
        self.rotary_emb = RotaryEmbedding(self.head_dim, args.max_position_embeddings, args.rope_theta)

    def forward(self, positions, hidden):
        bsz, seq, _ = hidden.shape
        q, k, v = self.qkv_proj(hidden).chunk(3, dim=-1)
        q = q.view(bsz, seq, self.num_heads, self.head_dim)
        k = k.view(bsz, seq, self.num_heads, self.head_dim)
        v = v.view(bsz, seq, self.num_heads, self.head_dim)
        q, k = self.rotary_emb(positions, q, k)
        attn = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.o_proj(attn.transpose(1, 2).reshape(bsz, seq, -1))


class LlamaMLP(nn.Module):
    def __init__(self, args: ServerArgs):
        super().__init__()
        self.gate_up_proj = nn.Linear(args.hidden_size, 2 * args.intermediate_size, bias=False)
        self.down_proj = nn.Linear(args.intermediate_size, args.hidden_size, bias=False)

    def forward(self, x):
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class LlamaDecoderLayer(nn.Module):
    def __init__(self, args: ServerArgs):
        super().__init__()
        self.input_layernorm = RMSNorm(args.hidden_size)
        self.self_attn = LlamaAttention(args)
        self.post_attention_layernorm = RMSNorm(args.hidden_size)
        self.mlp = LlamaMLP(args)

    def forward(self, positions, hidden):
        hidden = hidden + self.self_attn(positions, self.input_layernorm(hidden))
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


class LlamaForCausalLM(nn.Module):
    def __init__(self, args: ServerArgs):
        super().__init__()
        self.embed_tokens = nn.Embedding(args.vocab_size, args.hidden_size)
        self.layers = nn.ModuleList([LlamaDecoderLayer(args) for _ in range(args.num_layers)])
        self.norm = RMSNorm(args.hidden_size)
        self.lm_head = nn.Linear(args.hidden_size, args.vocab_size, bias=False)

    def forward(self, input_ids, positions):
        hidden = self.embed_tokens(input_ids)
        for layer in self.layers:
            hidden = layer(positions, hidden)
        return self.lm_head(self.norm(hidden))


# ------------------------------------------------------------------ memory saver utils
@contextlib.contextmanager
def set_default_torch_dtype(dtype: torch.dtype):
    old_dtype = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old_dtype)


def _export_static_state(model: nn.Module) -> Dict[str, list]:
    return dict(buffers=[(name, buffer.detach().clone()) for name, buffer in model.named_buffers()])


def _import_static_state(model: nn.Module, static_params: Dict[str, list]) -> None:
    self_named_buffers = dict(model.named_buffers())
    for name, tensor in static_params["buffers"]:
        self_named_buffers[name][...] = tensor  # raises


def synthetic_checkpoint(model: nn.Module, seed: int) -> Dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {name: torch.randn(p.shape, generator=g) * 0.05 for name, p in model.named_parameters()}


# ----------------------------------------------------------------------- model runner
class ModelRunner:
    def __init__(self, server_args: ServerArgs):
        self.server_args = server_args
        torch.manual_seed(server_args.seed)
        with set_default_torch_dtype(server_args.dtype):
            self.model = LlamaForCausalLM(server_args)
        self.model.eval()
        self._released_static_state: Optional[Dict[str, list]] = None
        self.memory_released = False

    @property
    def warmup_in_inference_mode(self) -> bool:
        return self.server_args.device_capability[0] >= 10

    def _dummy_forward(self, batch_size: int):
        ids = torch.zeros(batch_size, 4, dtype=torch.long)
        positions = torch.arange(4)
        return self.model(ids, positions)

    def warmup(self):
        for bs in self.server_args.warmup_batch:
            if self.warmup_in_inference_mode:
                with torch.inference_mode():
                    self._dummy_forward(bs)
            else:
                with torch.no_grad():
                    self._dummy_forward(bs)

    @torch.no_grad()
    def forward_batch(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1])
        return self.model(input_ids, positions)[:, -1, :]

    def release_memory_occupation(self):
        if self.server_args.enable_memory_saver:
            self._released_static_state = _export_static_state(self.model)
        self.memory_released = True

    def resume_memory_occupation(self):
        if self._released_static_state is not None:
            _import_static_state(self.model, self._released_static_state)
            self._released_static_state = None
        self.memory_released = False

    @torch.no_grad()
    def update_weights_from_disk(self, seed: int):
        state = synthetic_checkpoint(self.model, seed)
        for name, param in self.model.named_parameters():
            param.copy_(state[name].to(param.dtype))


# ------------------------------------------------------------------------------ engine
class Engine:
    def __init__(self, server_args: ServerArgs):
        self.server_args = server_args
        self.runner = ModelRunner(server_args)
        self.runner.warmup()
        self.stats = {"requests": 0, "tokens": 0}

    def generate(self, prompts: List[List[int]]) -> List[List[int]]:
        if self.runner.memory_released:
            raise RuntimeError("engine is sleeping")
        outputs = []
        for prompt in prompts:
            ids = torch.tensor([prompt], dtype=torch.long)
            out = []
            for _ in range(self.server_args.max_new_tokens):
                logits = self.runner.forward_batch(ids)
                nxt = int(logits.float().argmax(-1))
                out.append(nxt)
                ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
            outputs.append(out)
            self.stats["requests"] += 1
            self.stats["tokens"] += len(out)
        return outputs

    def release_memory_occupation(self):
        self.runner.release_memory_occupation()

    def resume_memory_occupation(self):
        self.runner.resume_memory_occupation()

    def update_weights_from_disk(self, seed: int):
        self.runner.update_weights_from_disk(seed)


def main():
    args = ServerArgs()
    engine = Engine(args)
    prompts = [[1, 2, 3, 4], [5, 6, 7], [9, 10, 11, 12, 13]]

    t0 = time.time()
    first = engine.generate(prompts)
    print("before sleep:", first)

    for cycle in range(2):
        engine.release_memory_occupation()
        engine.resume_memory_occupation()
        engine.update_weights_from_disk(seed=100 + cycle)
        outs = engine.generate(prompts)
        print(f"after wake {cycle}:", outs)

    print(f"stats={engine.stats} elapsed={time.time() - t0:.2f}s")


if __name__ == "__main__":
    main()
