# expect: inference_tensor
# source: https://github.com/unslothai/unsloth/issues/2610
"""GRPO (group relative policy optimization) fine-tuning of a small causal LM.

Follows the structure of RLHF trainers built on Llama-style models: a config
dataclass, a toy character tokenizer, a decoder-only transformer whose rotary
embedding keeps a cos/sin cache on the module and grows it on demand, a fast
generation path for rollouts, rule-based reward functions, a GRPOTrainer that
samples a group of completions per prompt, normalises rewards within the group,
computes per-token log-probs against a frozen reference model (KL penalty) and
takes optimizer steps with a warmup schedule, plus a logging callback.
Synthetic arithmetic prompts, CPU only.
"""
import copy
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GRPOConfig:
    vocab: str = "0123456789+=;# "
    hidden_size: int = 32
    num_heads: int = 4
    num_layers: int = 2
    max_position_embeddings: int = 8
    rope_theta: float = 10000.0
    num_generations: int = 4
    max_completion_length: int = 6
    temperature: float = 1.0
    beta: float = 0.04
    learning_rate: float = 5e-4
    warmup_steps: int = 2
    max_steps: int = 4
    logging_steps: int = 1


class CharTokenizer:
    def __init__(self, vocab):
        self.vocab = vocab
        self.stoi = {c: i for i, c in enumerate(vocab)}

    def encode(self, s):
        return torch.tensor([self.stoi[c] for c in s], dtype=torch.long)

    def decode(self, ids):
        return "".join(self.vocab[int(i)] for i in ids)


class RotaryEmbedding(nn.Module):
    def __init__(self, dim, max_position_embeddings, base, cache_chunk=16):
        super().__init__()
        self.cache_chunk = cache_chunk
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self._set_cos_sin_cache(max_position_embeddings)

    def _set_cos_sin_cache(self, seq_len):
        self.max_seq_len_cached = seq_len
        t = torch.arange(seq_len, dtype=self.inv_freq.dtype)
        freqs = torch.outer(t, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos_cached = emb.cos()
        self.sin_cached = emb.sin()

    def forward(self, seq_len):
        if seq_len > self.max_seq_len_cached:
            # grow in chunks so that decoding does not rebuild the table at every step
            self._set_cos_sin_cache(math.ceil(seq_len / self.cache_chunk) * self.cache_chunk)
        return self.cos_cached[:seq_len], self.sin_cached[:seq_len]


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    q_embed = (q * cos) + (rotate_half(q) * sin)  # raises
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.h, self.d = cfg.num_heads, cfg.hidden_size // cfg.num_heads
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size, bias=False)
        self.o = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False)
        self.rotary_emb = RotaryEmbedding(self.d, cfg.max_position_embeddings, cfg.rope_theta)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.h, self.d).permute(2, 0, 3, 1, 4)
        cos, sin = self.rotary_emb(t)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(out.transpose(1, 2).reshape(b, t, -1))


class DecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(cfg.hidden_size), nn.LayerNorm(cfg.hidden_size)
        self.attn = Attention(cfg)
        self.mlp = nn.Sequential(nn.Linear(cfg.hidden_size, 4 * cfg.hidden_size), nn.SiLU(),
                                 nn.Linear(4 * cfg.hidden_size, cfg.hidden_size))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(len(cfg.vocab), cfg.hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(cfg) for _ in range(cfg.num_layers)])
        self.norm = nn.LayerNorm(cfg.hidden_size)
        self.lm_head = nn.Linear(cfg.hidden_size, len(cfg.vocab), bias=False)

    def forward(self, input_ids):
        x = self.embed(input_ids)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x))

    @torch.inference_mode()
    def generate(self, input_ids, max_new_tokens, temperature, generator):
        for _ in range(max_new_tokens):
            logits = self(input_ids)[:, -1] / temperature
            nxt = torch.multinomial(torch.softmax(logits, -1), 1, generator=generator)
            input_ids = torch.cat([input_ids, nxt], dim=1)
        return input_ids


def format_reward(texts):
    return [1.0 if ";" in t else 0.0 for t in texts]


def correctness_reward(prompts, texts):
    out = []
    for p, t in zip(prompts, texts):
        a, b = p.rstrip("=").split("+")
        out.append(2.0 if t.startswith(str(int(a) + int(b))) else 0.0)
    return out


def per_token_logps(model, ids, prompt_len):
    logits = model(ids)[:, prompt_len - 1:-1]
    return torch.gather(logits.log_softmax(-1), 2, ids[:, prompt_len:].unsqueeze(-1)).squeeze(-1)


class GRPOTrainer:
    def __init__(self, model, cfg, tokenizer, prompts):
        self.model, self.cfg, self.tok, self.prompts = model, cfg, tokenizer, prompts
        self.ref_model = copy.deepcopy(model).eval()
        for p in self.ref_model.parameters():
            p.requires_grad_(False)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / cfg.warmup_steps))
        self.gen = torch.Generator().manual_seed(0)
        self.state = {"step": 0, "log": []}

    def _generate_completions(self, prompt):
        ids = self.tok.encode(prompt).unsqueeze(0).repeat(self.cfg.num_generations, 1)
        self.model.eval()
        full = self.model.generate(ids, self.cfg.max_completion_length, self.cfg.temperature, self.gen)
        self.model.train()
        return full.clone()

    def compute_loss(self, prompt):
        full = self._generate_completions(prompt)
        plen = len(prompt)
        texts = [self.tok.decode(row[plen:]) for row in full]
        rewards = torch.tensor([f + c for f, c in zip(format_reward(texts),
                                                      correctness_reward([prompt] * len(texts), texts))])
        adv = (rewards - rewards.mean()) / (rewards.std() + 1e-4)
        logps = per_token_logps(self.model, full, plen)
        with torch.no_grad():
            ref_logps = per_token_logps(self.ref_model, full, plen)
        kl = torch.exp(ref_logps - logps) - (ref_logps - logps) - 1
        loss = -(torch.exp(logps - logps.detach()) * adv.unsqueeze(1) - self.cfg.beta * kl).mean()
        return loss, rewards.mean().item()

    def training_step(self, prompt):
        loss, reward = self.compute_loss(prompt)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        return loss.item(), reward

    def train(self):
        for step in range(self.cfg.max_steps):
            loss, reward = self.training_step(self.prompts[step % len(self.prompts)])
            self.state["step"] = step + 1
            if (step + 1) % self.cfg.logging_steps == 0:
                self.state["log"].append({"loss": loss, "reward": reward})
                print("step %d loss %.4f reward %.3f" % (step + 1, loss, reward))


def main():
    torch.manual_seed(0)
    cfg = GRPOConfig()
    tok = CharTokenizer(cfg.vocab)
    model = TinyCausalLM(cfg)
    prompts = ["1+2=", "3+4=", "2+5=", "4+4="]
    GRPOTrainer(model, cfg, tok, prompts).train()


if __name__ == "__main__":
    main()
