# expect: clean
# source: https://github.com/huggingface/transformers/issues/26377
"""Continued pre-training of a small LLaMA-style causal LM with LoRA adapters
(in the spirit of run_clm_pt_with_peft.py).

Raw token streams are concatenated and split into blocks (group_texts), the
base model is frozen and LoRA adapters are attached to the attention
projections; gradient checkpointing is enabled to save memory. A minimal
Trainer with a cosine schedule, callbacks and evaluation. Synthetic corpus, CPU.
"""
import math
import random
from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


@dataclass
class ModelArguments:
    vocab_size: int = 96
    hidden_size: int = 32
    intermediate_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    rms_norm_eps: float = 1e-6


@dataclass
class DataTrainingArguments:
    block_size: int = 16
    num_documents: int = 24


@dataclass
class TrainingArguments:
    per_device_train_batch_size: int = 4
    learning_rate: float = 2e-4
    warmup_ratio: float = 0.1
    max_steps: int = 4
    gradient_checkpointing: bool = True
    lora_rank: int = 8
    lora_alpha: float = 32.0
    lora_dropout: float = 0.05
    trainable: List[str] = field(default_factory=lambda: ["q_proj", "v_proj"])
    modules_to_save: Optional[List[str]] = None
    seed: int = 42


class LlamaRMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class LlamaAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.nh = cfg.num_attention_heads
        d = cfg.hidden_size
        self.q_proj, self.k_proj = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.v_proj, self.o_proj = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)

    def forward(self, x):
        B, S, D = x.shape
        q, k, v = (p(x).view(B, S, self.nh, -1).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(B, S, D))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = LlamaAttention(cfg)
        self.post_attention_layernorm = LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([LlamaDecoderLayer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.norm = LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.gradient_checkpointing = False

    def get_input_embeddings(self):
        return self.embed_tokens

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None):
        self.gradient_checkpointing = True
        self._ckpt_kwargs = gradient_checkpointing_kwargs or {"use_reentrant": True}

    def enable_input_require_grads(self):
        def make_inputs_require_grads(module, inputs, output):
            output.requires_grad_(True)
        self._require_grads_hook = self.get_input_embeddings().register_forward_hook(make_inputs_require_grads)

    def forward(self, input_ids, labels=None):
        hidden = self.embed_tokens(input_ids)
        for layer in self.layers:
            if self.gradient_checkpointing and self.training:
                hidden = checkpoint(layer, hidden, **self._ckpt_kwargs)
            else:
                hidden = layer(hidden)
        logits = self.lm_head(self.norm(hidden))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1))
        return {"loss": loss, "logits": logits}


class LoraLayer(nn.Module):
    def __init__(self, base, r, alpha, dropout):
        super().__init__()
        self.base_layer = base
        self.lora_A = nn.Parameter(torch.randn(r, base.in_features) / math.sqrt(base.in_features))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r))
        self.scaling, self.drop = alpha / r, nn.Dropout(dropout)

    def forward(self, x):
        return self.base_layer(x) + (self.drop(x) @ self.lora_A.t() @ self.lora_B.t()) * self.scaling


def get_peft_model(model, args: TrainingArguments):
    model.requires_grad_(False)
    for layer in model.layers:
        for name in args.trainable:
            setattr(layer.self_attn, name, LoraLayer(getattr(layer.self_attn, name), args.lora_rank,
                                                     args.lora_alpha, args.lora_dropout))
    for name in args.modules_to_save or []:
        getattr(model, name).requires_grad_(True)
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    n_all = sum(p.numel() for p in model.parameters())
    print(f"trainable params: {n_train} || all params: {n_all} || trainable%: {100 * n_train / n_all:.2f}")
    return model


def group_texts(examples, block_size):
    concatenated = sum(examples, [])
    total = (len(concatenated) // block_size) * block_size
    return [concatenated[i:i + block_size] for i in range(0, total, block_size)]


class SavePeftModelCallback:
    def on_step_end(self, trainer, step, loss):
        if step % 2 == 0:
            trainer.saved[step] = {k: v.detach().clone() for k, v in trainer.model.named_parameters()
                                   if "lora_" in k}


class Trainer:
    def __init__(self, model, args, train_dataset, eval_dataset, callbacks=()):
        self.model, self.args = model, args
        self.train_dataset, self.eval_dataset = train_dataset, eval_dataset
        self.callbacks = list(callbacks)
        self.saved = {}
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=args.learning_rate, weight_decay=0.0)
        warmup = max(1, int(args.max_steps * args.warmup_ratio))
        self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            lambda s: (s + 1) / warmup if s < warmup else 0.5 * (1 + math.cos(math.pi * (s - warmup) / args.max_steps)))

    def get_train_batch(self, step):
        bs = self.args.per_device_train_batch_size
        idx = [(step * bs + i) % len(self.train_dataset) for i in range(bs)]
        ids = torch.tensor([self.train_dataset[i] for i in idx])
        return {"input_ids": ids, "labels": ids.clone()}

    def compute_loss(self, model, inputs):
        return model(**inputs)["loss"]

    def training_step(self, model, inputs):
        model.train()
        loss = self.compute_loss(model, inputs)
        loss.backward()
        return loss.detach()

    def evaluate(self):
        self.model.eval()
        with torch.no_grad():
            ids = torch.tensor(self.eval_dataset)
            loss = self.compute_loss(self.model, {"input_ids": ids, "labels": ids})
        return {"eval_loss": loss.item(), "perplexity": math.exp(min(20.0, loss.item()))}

    def train(self):
        for step in range(self.args.max_steps):
            loss = self.training_step(self.model, self.get_train_batch(step))
            torch.nn.utils.clip_grad_norm_([p for p in self.model.parameters() if p.requires_grad], 1.0)
            self.optimizer.step()
            self.lr_scheduler.step()
            self.optimizer.zero_grad()
            for cb in self.callbacks:
                cb.on_step_end(self, step + 1, loss.item())
        return self.evaluate()


def main():
    model_args, data_args, training_args = ModelArguments(), DataTrainingArguments(), TrainingArguments()
    random.seed(training_args.seed)
    np.random.seed(training_args.seed)
    torch.manual_seed(training_args.seed)

    docs = [np.random.randint(1, model_args.vocab_size, size=np.random.randint(10, 40)).tolist()
            for _ in range(data_args.num_documents)]
    blocks = group_texts(docs, data_args.block_size)
    train_dataset, eval_dataset = blocks[:-4], blocks[-4:]

    model = LlamaForCausalLM(model_args)
    if training_args.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
        model.enable_input_require_grads()
    model = get_peft_model(model, training_args)

    trainer = Trainer(model, training_args, train_dataset, eval_dataset, callbacks=[SavePeftModelCallback()])
    metrics = trainer.train()
    print("eval", {k: round(v, 4) for k, v in metrics.items()})


if __name__ == "__main__":
    main()
