# expect: clean
# source: https://github.com/Lightning-AI/litgpt/pull/837
import math
import time
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    vocab_size: int = 96
    block_size: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 32
    bias: bool = False

    @property
    def head_size(self):
        return self.n_embd // self.n_head


class CharTokenizer:
    def __init__(self, vocab_size):
        self.vocab_size = vocab_size
        self.eos_id = 0

    def encode(self, text):
        return torch.tensor([1 + (ord(c) % (self.vocab_size - 1)) for c in text], dtype=torch.long)

    def decode(self, ids):
        return "".join(chr(32 + (int(i) % 90)) for i in ids)


class KVCache(nn.Module):
    def __init__(self, k_shape, v_shape, dtype=torch.float32):
        super().__init__()
        self.register_buffer("k", torch.zeros(k_shape, dtype=dtype), persistent=False)
        self.register_buffer("v", torch.zeros(v_shape, dtype=dtype), persistent=False)

    def forward(self, input_pos, k, v):
        self.k.index_copy_(2, input_pos, k)
        self.v.index_copy_(2, input_pos, v)
        return self.k, self.v

    def reset_parameters(self):
        torch.nn.init.zeros_(self.k)
        torch.nn.init.zeros_(self.v)


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.kv_cache: Optional[KVCache] = None

    def forward(self, x, mask, input_pos=None):
        B, T, C = x.size()
        q, k, v = self.attn(x).split(C, dim=2)
        q = q.view(B, T, self.config.n_head, self.config.head_size).transpose(1, 2)
        k = k.view(B, T, self.config.n_head, self.config.head_size).transpose(1, 2)
        v = v.view(B, T, self.config.n_head, self.config.head_size).transpose(1, 2)
        if input_pos is not None:
            k, v = self.kv_cache(input_pos, k, v)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0 / math.sqrt(self.config.head_size))
        return self.proj(y.transpose(1, 2).reshape(B, T, C))

    def build_kv_cache(self, batch_size, max_seq_length):
        shape = (batch_size, self.config.n_head, max_seq_length, self.config.head_size)
        return KVCache(shape, shape)


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.norm_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.norm_2 = nn.LayerNorm(config.n_embd)
        self.mlp = nn.Sequential(nn.Linear(config.n_embd, 4 * config.n_embd), nn.GELU(), nn.Linear(4 * config.n_embd, config.n_embd))

    def forward(self, x, mask, input_pos=None):
        x = x + self.attn(self.norm_1(x), mask, input_pos)
        return x + self.mlp(self.norm_2(x))


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer = nn.ModuleDict(
            dict(wte=nn.Embedding(config.vocab_size, config.n_embd), h=nn.ModuleList(Block(config) for _ in range(config.n_layer)), ln_f=nn.LayerNorm(config.n_embd))
        )
        self.mask_cache = None
        self.max_seq_length = config.block_size

    def set_kv_cache(self, batch_size):
        for block in self.transformer.h:
            block.attn.kv_cache = block.attn.build_kv_cache(batch_size, self.max_seq_length)
        ones = torch.ones((self.max_seq_length, self.max_seq_length), dtype=torch.bool)
        self.mask_cache = torch.tril(ones).unsqueeze(0).unsqueeze(0)

    def forward(self, idx, input_pos=None):
        T = idx.size(1)
        if input_pos is not None:
            mask = self.mask_cache.index_select(2, input_pos)[:, :, :, : self.max_seq_length]
        else:
            mask = torch.tril(torch.ones((T, T), dtype=torch.bool))
        x = self.transformer.wte(idx)
        for block in self.transformer.h:
            x = block(x, mask, input_pos)
        return self.lm_head(self.transformer.ln_f(x))


def sample(logits, temperature=1.0, top_k=None, generator=None):
    logits = logits[0, -1] / max(temperature, 1e-5)
    if top_k is not None:
        v, i = torch.topk(logits, min(top_k, logits.size(-1)))
        logits = torch.full_like(logits, float("-inf")).scatter_(-1, i, v)
    probs = torch.nn.functional.softmax(logits, dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator)


@torch.inference_mode()
def generate(model, prompt, max_returned_tokens, temperature=0.8, top_k=20, eos_id=None, generator=None):
    if model.transformer.h[0].attn.kv_cache is None:
        model.set_kv_cache(batch_size=1)
    T = prompt.size(0)
    tokens = [prompt]
    input_pos = torch.arange(0, T)
    token = sample(model(prompt.view(1, -1), input_pos), temperature, top_k, generator)
    tokens.append(token)
    for _ in range(2, max_returned_tokens - T + 1):
        input_pos = input_pos[-1:].add_(1)
        token = sample(model(token.view(1, -1), input_pos), temperature, top_k, generator)
        tokens.append(token)
        if token.item() == eos_id:
            break
    return torch.cat(tokens)


def main(prompt="Hello, my name is", num_samples=3, max_new_tokens=12, seed=1234):
    torch.manual_seed(seed)
    config = Config()
    tokenizer = CharTokenizer(config.vocab_size)
    model = GPT(config).eval()
    encoded = tokenizer.encode(prompt)
    max_returned_tokens = encoded.size(0) + max_new_tokens
    generator = torch.Generator().manual_seed(seed)
    for i in range(num_samples):
        t0 = time.perf_counter()
        y = generate(model, encoded, max_returned_tokens, eos_id=tokenizer.eos_id, generator=generator)
        t = time.perf_counter() - t0
        with torch.inference_mode():
            for block in model.transformer.h:
                block.attn.kv_cache.reset_parameters()
        tokens_generated = y.size(0) - encoded.size(0)
        print(f"sample {i}: {tokenizer.decode(y[encoded.size(0):])!r} ({tokens_generated} tokens, {t:.3f}s)")


if __name__ == "__main__":
    main()
