# expect: clean
# source: https://github.com/lm-sys/FastChat/issues/581
"""LoRA fine-tuning of a (tiny) LLaMA with gradient checkpointing, train_lora.py
style: dataclass arguments, a PEFT-like `get_peft_model`, and a small Trainer with
gradient accumulation and an evaluation pass after every epoch.
"""
import math
from dataclasses import dataclass, field
from functools import partial
from typing import List

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint


# ------------------------------------------------------------- modeling_llama
@dataclass
class LlamaConfig:
    vocab_size: int = 64
    hidden_size: int = 32
    intermediate_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    rms_norm_eps: float = 1e-6
    max_position_embeddings: int = 64


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class LlamaRotaryEmbedding(nn.Module):
    def __init__(self, dim, max_position_embeddings=64, base=10000):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        t = torch.arange(max_position_embeddings).float()
        emb = torch.cat((torch.outer(t, inv_freq),) * 2, dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    def forward(self, seq_len):
        return self.cos_cached[:seq_len], self.sin_cached[:seq_len]


class LlamaAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // self.num_heads
        h = config.hidden_size
        self.q_proj = nn.Linear(h, h, bias=False)
        self.k_proj = nn.Linear(h, h, bias=False)
        self.v_proj = nn.Linear(h, h, bias=False)
        self.o_proj = nn.Linear(h, h, bias=False)
        self.rotary_emb = LlamaRotaryEmbedding(self.head_dim, config.max_position_embeddings)

    def forward(self, hidden_states):
        bsz, q_len, _ = hidden_states.size()
        shape = (bsz, q_len, self.num_heads, self.head_dim)
        q = self.q_proj(hidden_states).view(shape).transpose(1, 2)
        k = self.k_proj(hidden_states).view(shape).transpose(1, 2)
        v = self.v_proj(hidden_states).view(shape).transpose(1, 2)
        cos, sin = self.rotary_emb(q_len)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        attn = (q @ k.transpose(2, 3)) / math.sqrt(self.head_dim)
        mask = torch.full((q_len, q_len), float("-inf")).triu(1)
        attn = F.softmax(attn + mask, dim=-1)
        out = (attn @ v).transpose(1, 2).reshape(bsz, q_len, -1)
        return self.o_proj(out)


class LlamaMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.self_attn = LlamaAttention(config)
        self.mlp = LlamaMLP(config)
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, hidden_states):
        hidden_states = hidden_states + self.self_attn(self.input_layernorm(hidden_states))
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))


class LlamaModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([LlamaDecoderLayer(config) for _ in range(config.num_hidden_layers)])
        self.norm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.gradient_checkpointing = False

    def forward(self, input_ids):
        hidden_states = self.embed_tokens(input_ids)
        for decoder_layer in self.layers:
            if self.gradient_checkpointing and self.training:
                hidden_states = self._gradient_checkpointing_func(decoder_layer, hidden_states)
            else:
                hidden_states = decoder_layer(hidden_states)
        return self.norm(hidden_states)


class LlamaForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.model = LlamaModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None):
        kwargs = gradient_checkpointing_kwargs or {"use_reentrant": True}
        self.model._gradient_checkpointing_func = partial(torch.utils.checkpoint.checkpoint, **kwargs)
        self.model.gradient_checkpointing = True

    def enable_input_require_grads(self):
        def make_inputs_require_grads(module, input, output):
            output.requires_grad_(True)

        self._require_grads_hook = self.model.embed_tokens.register_forward_hook(make_inputs_require_grads)

    def forward(self, input_ids, labels=None):
        logits = self.lm_head(self.model(input_ids))
        loss = None
        if labels is not None:
            shift_logits = logits[..., :-1, :].contiguous()
            shift_labels = labels[..., 1:].contiguous()
            loss = F.cross_entropy(shift_logits.view(-1, self.config.vocab_size),
                                   shift_labels.view(-1), ignore_index=-100)
        return {"loss": loss, "logits": logits}


# ---------------------------------------------------------------------- peft
@dataclass
class LoraConfig:
    r: int = 4
    lora_alpha: int = 8
    lora_dropout: float = 0.05
    target_modules: List[str] = field(default_factory=lambda: ["q_proj", "v_proj"])


class LoraLinear(nn.Module):
    def __init__(self, base: nn.Linear, r, alpha, dropout):
        super().__init__()
        self.base = base
        self.lora_A = nn.Linear(base.in_features, r, bias=False)
        self.lora_B = nn.Linear(r, base.out_features, bias=False)
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)
        self.scaling = alpha / r
        self.lora_dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.base(x) + self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling


def get_peft_model(model, config: LoraConfig):
    for p in model.parameters():
        p.requires_grad_(False)
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if child_name in config.target_modules and isinstance(child, nn.Linear):
                setattr(module, child_name, LoraLinear(child, config.r, config.lora_alpha, config.lora_dropout))
    return model


def print_trainable_parameters(model):
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    print(f"trainable params: {trainable} || all params: {total} || trainable%: {100 * trainable / total:.2f}")


# ------------------------------------------------------------------ training
@dataclass
class TrainingArguments:
    num_train_epochs: int = 2
    per_device_train_batch_size: int = 4
    gradient_accumulation_steps: int = 2
    learning_rate: float = 2e-3
    gradient_checkpointing: bool = True
    seed: int = 0


class Trainer:
    def __init__(self, model, args, train_data, eval_data):
        self.model, self.args = model, args
        self.train_data, self.eval_data = train_data, eval_data
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=args.learning_rate)

    def training_step(self, batch):
        self.model.train()
        loss = self.model(batch, labels=batch)["loss"]
        loss = loss / self.args.gradient_accumulation_steps
        loss.backward()
        return loss.detach()

    @torch.no_grad()
    def evaluate(self):
        self.model.eval()
        losses = [self.model(b, labels=b)["loss"].item() for b in self.batches(self.eval_data)]
        return sum(losses) / len(losses)

    def batches(self, data):
        bs = self.args.per_device_train_batch_size
        return [data[i:i + bs] for i in range(0, len(data), bs)]

    def train(self):
        for epoch in range(self.args.num_train_epochs):
            tr_loss = 0.0
            for step, batch in enumerate(self.batches(self.train_data)):
                tr_loss += self.training_step(batch).item()
                if (step + 1) % self.args.gradient_accumulation_steps == 0:
                    torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
                    self.optimizer.step()
                    self.optimizer.zero_grad()
            print(f"epoch {epoch}: train loss {tr_loss:.4f} eval loss {self.evaluate():.4f}")


def make_conversations(n, seq_len, vocab, g):
    """Toy 'conversations': a prompt followed by its reversal as the answer."""
    prompt = torch.randint(3, vocab, (n, seq_len // 2), generator=g)
    return torch.cat([prompt, prompt.flip(-1)], dim=1)


def train():
    training_args = TrainingArguments()
    lora_args = LoraConfig()
    torch.manual_seed(training_args.seed)
    g = torch.Generator().manual_seed(training_args.seed)
    model = LlamaForCausalLM(LlamaConfig())
    model = get_peft_model(model, lora_args)
    if training_args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
        model.enable_input_require_grads()
    print_trainable_parameters(model)
    trainer = Trainer(model, training_args,
                      make_conversations(32, 16, model.config.vocab_size, g),
                      make_conversations(8, 16, model.config.vocab_size, g))
    trainer.train()


train()
