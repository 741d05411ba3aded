# expect: clean
# source: https://github.com/OpenBMB/BMInf/issues/66
"""Delta-tuning (LoRA) a CPM-Ant-like causal LM under a low-memory wrapper
(in the spirit of tune_cpm_ant.py with OpenDelta and BMInf).

The backbone's linear layers are replaced by int8 weights with per-channel
scales by a memory-saving wrapper, LoRA deltas are attached to the attention
projections, and everything except the deltas is frozen before training.
Synthetic token data; CPU only.
"""
import math
import random
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.project_q = nn.Linear(dim, dim, bias=False)
        self.project_k = nn.Linear(dim, dim, bias=False)
        self.project_v = nn.Linear(dim, dim, bias=False)
        self.attention_out = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        B, S, D = x.shape
        q, k, v = (p(x).view(B, S, self.heads, -1).transpose(1, 2)
                   for p in (self.project_q, self.project_k, self.project_v))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.attention_out(out.transpose(1, 2).reshape(B, S, D))


class TransformerBlock(nn.Module):
    def __init__(self, dim, heads, ffn):
        super().__init__()
        self.ln_att, self.ln_ff = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.self_att = Attention(dim, heads)
        self.w_in, self.w_out = nn.Linear(dim, ffn, bias=False), nn.Linear(ffn, dim, bias=False)

    def forward(self, x):
        x = x + self.self_att(self.ln_att(x))
        return x + self.w_out(F.gelu(self.w_in(self.ln_ff(x))))


class CPMAnt(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_embedding = nn.Embedding(cfg.vocab_size, cfg.dim_model)
        self.segment_embedding = nn.Embedding(cfg.segment_types, cfg.dim_model)
        self.encoder = nn.ModuleList([TransformerBlock(cfg.dim_model, cfg.num_heads, cfg.dim_ff)
                                      for _ in range(cfg.num_layers)])
        self.output_layernorm = nn.LayerNorm(cfg.dim_model)

    def forward(self, input_ids, segment_ids):
        h = self.input_embedding(input_ids) + self.segment_embedding(segment_ids)
        for blk in self.encoder:
            h = blk(h)
        h = self.output_layernorm(h)
        return h @ self.input_embedding.weight.t()


def bminf_wrapper(model, quantization=True):
    """Store linear weights as int8 plus a per-channel scale (memory-saving wrapper)."""
    if not quantization:
        return model
    for module in model.modules():
        if isinstance(module, nn.Linear):
            w = module.weight.data
            scale = w.abs().amax(dim=1, keepdim=True).clamp(min=1e-8) / 127.0
            module.register_buffer("weight_int8", torch.round(w / scale).to(torch.int8))
            module.weight_scale = nn.Parameter(scale)
            module._parameters["weight"] = module.weight_int8.float() * module.weight_scale
    return model


class LoRA(nn.Module):
    def __init__(self, in_features, out_features, r, alpha):
        super().__init__()
        self.lora_A = nn.Parameter(torch.randn(r, in_features) / math.sqrt(in_features))
        self.lora_B = nn.Parameter(torch.zeros(out_features, r))
        self.scaling = alpha / r

    def forward(self, x):
        return (x @ self.lora_A.t() @ self.lora_B.t()) * self.scaling


class LoraModel:
    """OpenDelta-style delta model: attaches LoRA to modules whose name ends with a key."""

    def __init__(self, backbone_model, modified_modules, lora_r=4, lora_alpha=8):
        self.backbone_model = backbone_model
        self.deltas = nn.ModuleDict()
        for name, module in backbone_model.named_modules():
            if isinstance(module, nn.Linear) and any(name.endswith(k) for k in modified_modules):
                delta = LoRA(module.in_features, module.out_features, lora_r, lora_alpha)
                self.deltas[name.replace(".", "_")] = delta
                module.add_module("deltas", delta)
                module.register_forward_hook(lambda m, inp, out: out + m.deltas(inp[0]))

    def _freeze_module_recursive(self, module, exclude, prefix):
        for n, p in module.named_parameters(recurse=False):
            next_prefix = n if prefix == "" else prefix + "." + n
            if not any(e in next_prefix for e in exclude):
                p.requires_grad = False
        for n, c in module.named_children():
            next_prefix = n if prefix == "" else prefix + "." + n
            if any(e in next_prefix for e in exclude):
                continue
            self._freeze_module_recursive(c, exclude=exclude, prefix=next_prefix)

    def freeze_module(self, exclude=("deltas",), set_state_dict=True):
        self._freeze_module_recursive(self.backbone_model, exclude, "")
        if set_state_dict:
            self.trainable_keys = [n for n, p in self.backbone_model.named_parameters() if p.requires_grad]

    def log(self):
        n_train = sum(p.numel() for p in self.backbone_model.parameters() if p.requires_grad)
        print(f"delta params: {n_train}, trainable keys: {len(self.trainable_keys)}")


class CPMAntTuner:
    def __init__(self, model, cfg):
        self.model, self.cfg = model, cfg
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.01)
        self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / cfg.warmup_iters))

    def batch(self):
        ids = torch.randint(0, self.cfg.vocab_size, (self.cfg.batch_size, self.cfg.max_length))
        return ids, torch.zeros_like(ids)

    def train_step(self):
        ids, seg = self.batch()
        logits = self.model(ids[:, :-1], seg[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1))
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.lr_scheduler.step()
        return loss.item()

    def fit(self):
        for it in range(self.cfg.iters):
            print(f"iter {it} loss {self.train_step():.4f}")


def main():
    cfg = SimpleNamespace(vocab_size=80, segment_types=4, dim_model=32, num_heads=4, dim_ff=64, num_layers=2,
                          batch_size=2, max_length=12, lr=1e-3, warmup_iters=2, iters=3,
                          use_bminf=False, delta_type="lora")
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    model = CPMAnt(cfg)
    if cfg.use_bminf:
        model = bminf_wrapper(model, quantization=True)
    delta_model = LoraModel(backbone_model=model, modified_modules=["project_q", "project_v"])
    delta_model.freeze_module(exclude=["deltas"], set_state_dict=True)
    delta_model.log()
    CPMAntTuner(model, cfg).fit()


if __name__ == "__main__":
    main()
