# expect: inference_tensor
# source: https://github.com/unslothai/unsloth/issues/2434
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
VOCAB, DIM = 32, 16


class RotaryEmbedding(nn.Module):
    def __init__(self, dim, max_position_embeddings=8, base=10000):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)), persistent=False)
        self._set_cos_sin_cache(max_position_embeddings)

    def _set_cos_sin_cache(self, seq_len):
        self.max_seq_len_cached = seq_len
        freqs = torch.outer(torch.arange(seq_len).float(), self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    def forward(self, seq_len):
        if seq_len > self.max_seq_len_cached:
            self._set_cos_sin_cache(seq_len)  # extend_rope_embedding
        return self.cos_cached[:seq_len], self.sin_cached[:seq_len]


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class TinyLlama(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.q, self.k, self.v = nn.Linear(DIM, DIM), nn.Linear(DIM, DIM), nn.Linear(DIM, DIM)
        self.rotary = RotaryEmbedding(DIM)
        self.lm_head = nn.Linear(DIM, VOCAB)

    def forward(self, ids):
        h = self.embed(ids)
        cos, sin = self.rotary(ids.shape[1])
        q, k = self.q(h), self.k(h)
        q = q * cos + rotate_half(q) * sin  # raises
        k = k * cos + rotate_half(k) * sin
        att = F.scaled_dot_product_attention(q, k, self.v(h), is_causal=True)
        return self.lm_head(h + att)


def per_token_logps(model, ids, n_prompt):
    logits = model(ids)[:, n_prompt - 1:-1]
    return torch.gather(logits.log_softmax(-1), 2, ids[:, n_prompt:, None]).squeeze(2)


policy = TinyLlama()
opt = torch.optim.AdamW(policy.parameters(), lr=1e-3)
prompts = torch.randint(0, VOCAB, (4, 6))

for step in range(2):
    with torch.inference_mode():  # fast generation + reference log-probs
        ids = prompts
        for _ in range(6):
            nxt = torch.multinomial(policy(ids)[:, -1].softmax(-1), 1)
            ids = torch.cat([ids, nxt], 1)
        old_logps = per_token_logps(policy, ids, prompts.shape[1])
    ids = ids.clone()
    rewards = (ids[:, 6:] % 2 == 0).float().mean(1)
    adv = (rewards - rewards.mean()) / (rewards.std() + 1e-4)
    logps = per_token_logps(policy, ids, prompts.shape[1])
    loss = -(torch.exp(logps - old_logps.clone()) * adv[:, None]).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    print(step, loss.item())
