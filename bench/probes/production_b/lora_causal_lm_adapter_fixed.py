# expect: clean
# source: https://github.com/huggingface/peft/pull/1372
"""Parameter-efficient fine-tuning of a small causal LM with LoRA.

The backbone is frozen; low-rank adapters are injected into the attention
projections and into the token embedding, mirroring the PEFT workflow
(prepare model -> inject adapters -> train only adapter weights).
"""
import math
from dataclasses import dataclass, field
from typing import List

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class LMConfig:
    vocab_size: int = 128
    d_model: int = 48
    n_heads: int = 4
    n_layers: int = 2
    max_len: int = 32
    dropout: float = 0.0


@dataclass
class LoraConfig:
    r: int = 4
    lora_alpha: int = 8
    lora_dropout: float = 0.05
    target_modules: List[str] = field(default_factory=lambda: ["q_proj", "v_proj", "embed_tokens"])


class SelfAttention(nn.Module):
    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.q_proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.k_proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.v_proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.o_proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x):
        b, t, d = x.shape
        split = lambda z: z.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2)
        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(att.transpose(1, 2).reshape(b, t, d))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = SelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(),
                                 nn.Linear(4 * cfg.d_model, cfg.d_model))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyCausalLM(nn.Module):
    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.embed_positions = nn.Embedding(cfg.max_len, cfg.d_model)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def get_input_embeddings(self):
        return self.embed_tokens

    def forward(self, input_ids, labels=None):
        pos = torch.arange(input_ids.shape[1])
        h = self.embed_tokens(input_ids) + self.embed_positions(pos)[None]
        for layer in self.layers:
            h = layer(h)
        logits = self.lm_head(self.ln_f(h))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1))
        return logits, loss


class LoraLinear(nn.Module):
    def __init__(self, base_layer: nn.Linear, cfg: LoraConfig):
        super().__init__()
        self.base_layer = base_layer
        self.lora_A = nn.Linear(base_layer.in_features, cfg.r, bias=False)
        self.lora_B = nn.Linear(cfg.r, base_layer.out_features, bias=False)
        self.lora_dropout = nn.Dropout(cfg.lora_dropout)
        self.scaling = cfg.lora_alpha / cfg.r
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)

    def forward(self, x):
        result = self.base_layer(x)
        return result + self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling


class LoraEmbedding(nn.Module):
    def __init__(self, base_layer: nn.Embedding, cfg: LoraConfig):
        super().__init__()
        self.base_layer = base_layer
        self.lora_embedding_A = nn.Parameter(torch.zeros(cfg.r, base_layer.num_embeddings))
        self.lora_embedding_B = nn.Parameter(torch.empty(base_layer.embedding_dim, cfg.r))
        self.scaling = cfg.lora_alpha / cfg.r
        nn.init.normal_(self.lora_embedding_B)

    def forward(self, x):
        result = self.base_layer(x)
        embedding_A = self.lora_embedding_A.T
        embedding_B = self.lora_embedding_B.T
        after_A = F.embedding(x, embedding_A, self.base_layer.padding_idx)
        result = result + (after_A @ embedding_B) * self.scaling
        return result


def enable_input_require_grads(model):
    def make_inputs_require_grads(module, inputs, output):
        output.requires_grad_(True)

    return model.get_input_embeddings().register_forward_hook(make_inputs_require_grads)


def prepare_model_for_training(model):
    for p in model.parameters():
        p.requires_grad_(False)
    for m in model.modules():
        if isinstance(m, nn.LayerNorm):
            m.float()
    model._input_hook = enable_input_require_grads(model)
    return model


def inject_adapters(model, cfg: LoraConfig):
    targets = []
    for name, module in model.named_modules():
        attr = name.split(".")[-1]
        if attr in cfg.target_modules:
            targets.append(name)
    for name in targets:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        base = getattr(parent, attr)
        wrapped = LoraEmbedding(base, cfg) if isinstance(base, nn.Embedding) else LoraLinear(base, cfg)
        setattr(parent, attr, wrapped)
    return targets


def print_trainable_parameters(model):
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    print(f"trainable params: {trainable} || all params: {total} || trainable%: {100 * trainable / total:.2f}")


def synthetic_corpus(cfg: LMConfig, n_batches, batch_size, seq_len):
    g = torch.Generator().manual_seed(0)
    for _ in range(n_batches):
        base = torch.randint(0, cfg.vocab_size // 2, (batch_size, 1), generator=g)
        ramp = torch.arange(seq_len)[None] * 2
        yield (base + ramp) % cfg.vocab_size


def train(model, n_steps=6, grad_accum=2, lr=1e-3):
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 2))
    model.train()
    for step, input_ids in enumerate(synthetic_corpus(model.cfg, n_steps, 4, 16)):
        _, loss = model(input_ids, labels=input_ids)
        (loss / grad_accum).backward()
        if (step + 1) % grad_accum == 0:
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
        print(f"step {step} loss {loss.item():.4f} lr {sched.get_last_lr()[0]:.2e}")


if __name__ == "__main__":
    torch.manual_seed(0)
    lm_cfg, lora_cfg = LMConfig(), LoraConfig()
    model = TinyCausalLM(lm_cfg)
    model = prepare_model_for_training(model)
    replaced = inject_adapters(model, lora_cfg)
    print("adapted modules:", replaced)
    print_trainable_parameters(model)
    train(model)
