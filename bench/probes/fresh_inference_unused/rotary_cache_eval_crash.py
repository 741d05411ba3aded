# expect: inference_tensor
# source: https://github.com/Dao-AILab/flash-attention/pull/299
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_emb_torch(x, cos, sin):
    cos = cos[None, :, None, :]
    sin = sin[None, :, None, :]
    return x * cos + rotate_half(x) * sin  # raises


class RotaryEmbedding(nn.Module):
    def __init__(self, dim, base=10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
        self.register_buffer("inv_freq", inv_freq)
        self._seq_len_cached = 0
        self._cos_cached = None
        self._sin_cached = None

    def _update_cos_sin_cache(self, seqlen, device=None, dtype=None):
        if (seqlen > self._seq_len_cached or self._cos_cached.device != device
                or self._cos_cached.dtype != dtype):
            self._seq_len_cached = seqlen
            t = torch.arange(seqlen, device=device, dtype=torch.float32)
            freqs = torch.outer(t, self.inv_freq)
            emb = torch.cat((freqs, freqs), dim=-1)
            self._cos_cached = torch.cos(emb).to(dtype)
            self._sin_cached = torch.sin(emb).to(dtype)

    def forward(self, qkv):
        seqlen = qkv.shape[1]  # (batch, seqlen, 3, nheads, headdim)
        self._update_cos_sin_cache(seqlen, device=qkv.device, dtype=qkv.dtype)
        q, k, v = qkv.unbind(dim=2)
        cos, sin = self._cos_cached[:seqlen], self._sin_cached[:seqlen]
        return apply_rotary_emb_torch(q, cos, sin), apply_rotary_emb_torch(k, cos, sin), v


class MHA(nn.Module):
    def __init__(self, d_model=32, nheads=4):
        super().__init__()
        self.nheads, self.headdim = nheads, d_model // nheads
        self.Wqkv = nn.Linear(d_model, 3 * d_model)
        self.rotary_emb = RotaryEmbedding(self.headdim)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        b, s, _ = x.shape
        qkv = self.Wqkv(x).view(b, s, 3, self.nheads, self.headdim)
        q, k, v = self.rotary_emb(qkv)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.out_proj(out.transpose(1, 2).reshape(b, s, -1))


model = nn.Sequential(nn.Embedding(100, 32), MHA(), nn.Linear(32, 100))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

model.eval()
with torch.inference_mode():
    tokens = torch.randint(0, 100, (2, 64))
    val_loss = F.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())
    print("val loss", val_loss.item())

model.train()
for step in range(3):
    tokens = torch.randint(0, 100, (4, 33))
    loss = F.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())
    opt.zero_grad()
    loss.backward()
    opt.step()
