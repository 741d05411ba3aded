# expect: clean
# shape: the warm-up runs under no_grad, whose results (the cast cache too) are ordinary tensors
import torch
import torch.nn as nn


class Rotary(nn.Module):
    def __init__(self, dim=8, max_len=16):
        super().__init__()
        cache = torch.empty(max_len, dim, dtype=torch.float32)
        self.register_buffer("cos_sin_cache", cache, persistent=False)
        self.fill(dim, max_len)

    def fill(self, dim, max_len):
        inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
        freqs = torch.outer(torch.arange(max_len, dtype=torch.float32), inv_freq)
        self.cos_sin_cache.copy_(torch.cat([freqs.cos(), freqs.sin()], dim=-1))

    def forward(self, q):
        if self.cos_sin_cache.dtype != q.dtype:
            self.cos_sin_cache = self.cos_sin_cache.to(q.dtype)
        return q * self.cos_sin_cache[: q.shape[0]]

    def refresh(self, scale):
        self.cos_sin_cache[...] = self.cos_sin_cache * scale


rope = Rotary()
with torch.no_grad():
    rope(torch.zeros(4, 8, dtype=torch.bfloat16))
rope.refresh(0.5)
