# expect: inference_tensor
# source: https://github.com/hiyouga/FastEdit/issues/26
"""ROME-style rank-one knowledge editing of a tiny LLaMA-like causal LM, after an
evaluation pass (FastEdit workflow: evaluate -> edit -> re-evaluate).

compute_u picks the key direction at the subject's last token, compute_v optimises
a residual `delta` injected at the MLP output of the rewrite layer so the target
token becomes likely, and the update W += u v^T is written into down_proj.
"""
import math
import random
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class ROMEHyperParams:
    layers: list = field(default_factory=lambda: [1])
    v_num_grad_steps: int = 8
    v_lr: float = 0.1
    v_loss_layer: int = 2
    v_weight_decay: float = 0.5
    clamp_norm_factor: float = 4.0
    kl_factor: float = 0.0625
    rewrite_module_tmp: str = "layers.{}.mlp.down_proj"
    mlp_module_tmp: str = "layers.{}.mlp"


class RotaryEmbedding(nn.Module):
    def __init__(self, dim, max_position_embeddings=16, base=10000):
        super().__init__()
        self.dim, self.base = dim, base
        self.register_buffer("inv_freq", 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)),
                             persistent=False)
        self._set_cos_sin_cache(max_position_embeddings)

    def _set_cos_sin_cache(self, seq_len):
        self.max_seq_len_cached = seq_len
        t = torch.arange(seq_len, dtype=self.inv_freq.dtype)
        emb = torch.cat([torch.outer(t, self.inv_freq)] * 2, dim=-1)
        self.cos_cached, self.sin_cached = emb.cos(), emb.sin()

    def forward(self, x, seq_len):
        if seq_len > self.max_seq_len_cached:
            self._set_cos_sin_cache(seq_len)
        return self.cos_cached[:seq_len].to(x.dtype), self.sin_cached[:seq_len].to(x.dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    q_embed = (q * cos) + (rotate_half(q) * sin)  # raises
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


class Attention(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h, self.hd = h, d // h
        self.q_proj, self.k_proj = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.v_proj, self.o_proj = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.rotary_emb = RotaryEmbedding(self.hd)

    def forward(self, x):
        B, T, D = x.shape
        q = self.q_proj(x).view(B, T, self.h, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.h, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.h, self.hd).transpose(1, 2)
        cos, sin = self.rotary_emb(v, seq_len=T)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(att.transpose(1, 2).reshape(B, T, D))


class MLP(nn.Module):
    def __init__(self, d, ff):
        super().__init__()
        self.gate_proj, self.up_proj = nn.Linear(d, ff, bias=False), nn.Linear(d, ff, bias=False)
        self.down_proj = nn.Linear(ff, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, d, h, ff):
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = nn.LayerNorm(d), nn.LayerNorm(d)
        self.self_attn, self.mlp = Attention(d, h), MLP(d, ff)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class TinyLlama(nn.Module):
    def __init__(self, vocab=40, d=32, h=4, ff=64, n_layers=3):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList([DecoderLayer(d, h, ff) for _ in range(n_layers)])
        self.norm, self.lm_head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, input_ids):
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x))


def get_module(model, name):
    for part in name.split("."):
        model = getattr(model, part)
    return model


@contextmanager
def trace_output(module, edit_output):
    handle = module.register_forward_hook(lambda m, i, o: edit_output(o))
    try:
        yield
    finally:
        handle.remove()


@torch.inference_mode()
def evaluate_model(model, prompts, targets):
    model.eval()
    correct = 0
    for prompt, target in zip(prompts, targets):
        logits = model(prompt[None])
        correct += int(logits[0, -1].argmax().item() == target)
    return correct / len(prompts)


def compute_u(model, request, hparams, layer):
    captured = {}

    def capture_key(module, inputs, output):
        captured["k"] = inputs[0].detach()

    down = get_module(model, hparams.rewrite_module_tmp.format(layer))
    handle = down.register_forward_hook(capture_key)
    with torch.no_grad():
        model(request["prompt"][None])
    handle.remove()
    u = captured["k"][0, request["subject_idx"]]
    return u / u.norm()


def compute_v(model, request, hparams, layer, left_vector):
    prompt, target, idx = request["prompt"], request["target"], request["subject_idx"]
    input_ids = torch.cat([prompt, target.view(1)])[None]
    d = model.embed_tokens.embedding_dim
    delta = torch.zeros(d, requires_grad=True)
    target_init = None

    def edit_output_fn(cur_out):
        nonlocal target_init
        if target_init is None:
            target_init = cur_out[0, idx].detach().clone()
        cur_out = cur_out.clone()
        cur_out[0, idx] = cur_out[0, idx] + delta
        return cur_out

    opt = torch.optim.Adam([delta], lr=hparams.v_lr)
    for p in model.parameters():
        p.requires_grad_(False)
    mlp = get_module(model, hparams.mlp_module_tmp.format(layer))
    for it in range(hparams.v_num_grad_steps):
        opt.zero_grad()
        with trace_output(mlp, edit_output_fn):
            logits = model(input_ids)
        log_probs = torch.log_softmax(logits[0, -2], dim=-1)
        nll_loss = -log_probs[target]
        weight_decay = hparams.v_weight_decay * (torch.norm(delta) / torch.norm(target_init) ** 2)
        loss = nll_loss + weight_decay
        loss.backward()
        opt.step()
        max_norm = hparams.clamp_norm_factor * target_init.norm()
        if delta.norm() > max_norm:
            with torch.no_grad():
                delta[...] = delta * max_norm / delta.norm()
    target_vec = target_init + delta.detach()
    return (target_vec - target_init) / torch.dot(left_vector, left_vector)


def apply_rome_to_model(model, requests, hparams):
    for request in requests:
        for layer in sorted(hparams.layers):
            u = compute_u(model, request, hparams, layer)
            v = compute_v(model, request, hparams, layer, u)
            with torch.no_grad():
                w = get_module(model, hparams.rewrite_module_tmp.format(layer)).weight
                w[...] += torch.outer(v, u)
    return model


def main():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    model = TinyLlama()
    g = torch.Generator().manual_seed(0)
    eval_prompts = [torch.randint(0, 40, (24,), generator=g) for _ in range(4)]
    eval_targets = [int(p[-1]) for p in eval_prompts]
    print("pre-edit accuracy:", evaluate_model(model, eval_prompts, eval_targets))
    request = {"prompt": torch.randint(0, 40, (10,), generator=g), "subject_idx": 6,
               "target": torch.tensor(7)}
    hparams = ROMEHyperParams()
    apply_rome_to_model(model, [request], hparams)
    with torch.no_grad():
        logits = model(request["prompt"][None])
    print("edited target prob:", round(F.softmax(logits[0, -1], -1)[7].item(), 4))
    print("post-edit accuracy:", evaluate_model(model, eval_prompts, eval_targets))


if __name__ == "__main__":
    main()
