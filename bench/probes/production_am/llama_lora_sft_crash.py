# expect: no_grad_fn
# source: https://github.com/datawhalechina/self-llm/issues/229
"""LoRA instruction fine-tuning of a small LLaMA-style causal LM (self-llm style SFT script).

The script builds a tiny decoder-only model (RMSNorm, rotary-free attention, SwiGLU MLP),
freezes the base weights, wraps the attention / MLP projections with LoRA adapters from a
LoraConfig, turns on gradient checkpointing to save memory, and runs a Trainer-like loop
with gradient accumulation, a cosine schedule and periodic evaluation.  The data are
synthetic chat prompts already tokenised into ids, with the instruction part masked out of
the labels by -100 as in the original process_func.
"""
import math
import random
from dataclasses import dataclass, field
from typing import List

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

IGNORE_INDEX = -100


@dataclass
class ModelArgs:
    vocab_size: int = 96
    hidden_size: int = 32
    intermediate_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    max_len: int = 24


@dataclass
class LoraConfig:
    r: int = 8
    lora_alpha: int = 32
    lora_dropout: float = 0.1
    target_modules: List[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj",
                                                               "gate_proj", "up_proj", "down_proj"])


@dataclass
class TrainingArguments:
    output_dir: str = "./output/llama3_lora"
    per_device_train_batch_size: int = 4
    gradient_accumulation_steps: int = 2
    num_train_epochs: int = 2
    learning_rate: float = 1e-4
    logging_steps: int = 2
    eval_steps: int = 4
    gradient_checkpointing: bool = True
    seed: int = 42


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * x * torch.rsqrt(var + self.eps)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.n_heads = args.num_heads
        self.head_dim = args.hidden_size // args.num_heads
        self.q_proj = nn.Linear(args.hidden_size, args.hidden_size, bias=False)
        self.k_proj = nn.Linear(args.hidden_size, args.hidden_size, bias=False)
        self.v_proj = nn.Linear(args.hidden_size, args.hidden_size, bias=False)
        self.o_proj = nn.Linear(args.hidden_size, args.hidden_size, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.gate_proj = nn.Linear(args.hidden_size, args.intermediate_size, bias=False)
        self.up_proj = nn.Linear(args.hidden_size, args.intermediate_size, bias=False)
        self.down_proj = nn.Linear(args.intermediate_size, args.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.input_layernorm = RMSNorm(args.hidden_size)
        self.self_attn = Attention(args)
        self.post_attention_layernorm = RMSNorm(args.hidden_size)
        self.mlp = MLP(args)

    def forward(self, hidden_states):
        hidden_states = hidden_states + self.self_attn(self.input_layernorm(hidden_states))
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))


class LlamaForCausalLM(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.embed_tokens = nn.Embedding(args.vocab_size, args.hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(args) for _ in range(args.num_layers)])
        self.norm = RMSNorm(args.hidden_size)
        self.lm_head = nn.Linear(args.hidden_size, args.vocab_size, bias=False)
        self.gradient_checkpointing = False
        self._require_grads_hook = None

    def get_input_embeddings(self):
        return self.embed_tokens

    def gradient_checkpointing_enable(self):
        self.gradient_checkpointing = True

    def enable_input_require_grads(self):
        def make_inputs_require_grads(module, inputs, output):
            output.requires_grad_(True)
        self._require_grads_hook = self.get_input_embeddings().register_forward_hook(make_inputs_require_grads)

    def forward(self, input_ids, labels=None):
        hidden_states = self.embed_tokens(input_ids)
        for layer in self.layers:
            if self.gradient_checkpointing and self.training:
                hidden_states = checkpoint(layer, hidden_states, use_reentrant=True)
            else:
                hidden_states = layer(hidden_states)
        logits = self.lm_head(self.norm(hidden_states))
        loss = None
        if labels is not None:
            shift_logits = logits[:, :-1, :].reshape(-1, logits.size(-1))
            shift_labels = labels[:, 1:].reshape(-1)
            loss = F.cross_entropy(shift_logits, shift_labels, ignore_index=IGNORE_INDEX)
        return loss, logits


class LoraLinear(nn.Module):
    """Frozen base projection plus a trainable low-rank update B @ A."""

    def __init__(self, base: nn.Linear, cfg: LoraConfig):
        super().__init__()
        self.base = base
        self.lora_A = nn.Linear(base.in_features, cfg.r, bias=False)
        self.lora_B = nn.Linear(cfg.r, base.out_features, bias=False)
        self.dropout = nn.Dropout(cfg.lora_dropout)
        self.scaling = cfg.lora_alpha / cfg.r
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)

    def forward(self, x):
        return self.base(x) + self.lora_B(self.lora_A(self.dropout(x))) * self.scaling


def get_peft_model(model, cfg: LoraConfig):
    for p in model.parameters():
        p.requires_grad = False
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if child_name in cfg.target_modules and isinstance(child, nn.Linear):
                setattr(module, child_name, LoraLinear(child, cfg))
    return model


def print_trainable_parameters(model):
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    print(f"trainable params: {trainable} || all params: {total} || trainable%: {100 * trainable / total:.2f}")


def process_func(example, args: ModelArgs):
    """Tokenised prompt + response; the prompt part is masked out of the labels."""
    prompt, response = example
    input_ids = prompt + response + [2]
    labels = [IGNORE_INDEX] * len(prompt) + response + [2]
    input_ids, labels = input_ids[:args.max_len], labels[:args.max_len]
    pad = args.max_len - len(input_ids)
    return input_ids + [0] * pad, labels + [IGNORE_INDEX] * pad


def make_dataset(n, args: ModelArgs, rng):
    data = []
    for _ in range(n):
        prompt = [rng.randrange(3, args.vocab_size) for _ in range(rng.randrange(6, 10))]
        response = [(t * 7 + 3) % (args.vocab_size - 3) + 3 for t in prompt[:rng.randrange(4, 8)]]
        data.append(process_func((prompt, response), args))
    return data


def collate(batch):
    ids = torch.tensor([b[0] for b in batch], dtype=torch.long)
    labels = torch.tensor([b[1] for b in batch], dtype=torch.long)
    return {"input_ids": ids, "labels": labels}


class Trainer:
    def __init__(self, model, args: TrainingArguments, train_dataset, eval_dataset):
        self.model = model
        self.args = args
        self.train_dataset = train_dataset
        self.eval_dataset = eval_dataset
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=args.learning_rate)
        steps_per_epoch = math.ceil(len(train_dataset) / args.per_device_train_batch_size / args.gradient_accumulation_steps)
        self.total_steps = steps_per_epoch * args.num_train_epochs
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, self.total_steps) / self.total_steps)))
        self.global_step = 0
        self.log_history = []

    def get_train_dataloader(self):
        data = list(self.train_dataset)
        random.shuffle(data)
        bs = self.args.per_device_train_batch_size
        return [collate(data[i:i + bs]) for i in range(0, len(data), bs)]

    def compute_loss(self, model, inputs):
        loss, _ = model(**inputs)
        return loss

    def training_step(self, model, inputs):
        model.train()
        loss = self.compute_loss(model, inputs)
        loss = loss / self.args.gradient_accumulation_steps
        loss.backward()  # raises
        return loss.detach()

    @torch.no_grad()
    def evaluate(self):
        self.model.eval()
        losses = [self.compute_loss(self.model, collate(self.eval_dataset[i:i + 4])).item()
                  for i in range(0, len(self.eval_dataset), 4)]
        metrics = {"eval_loss": float(np.mean(losses)), "step": self.global_step}
        self.log_history.append(metrics)
        return metrics

    def train(self):
        for epoch in range(self.args.num_train_epochs):
            tr_loss = 0.0
            for step, inputs in enumerate(self.get_train_dataloader()):
                tr_loss += self.training_step(self.model, inputs).item()
                if (step + 1) % self.args.gradient_accumulation_steps == 0:
                    torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
                    self.optimizer.step()
                    self.scheduler.step()
                    self.optimizer.zero_grad()
                    self.global_step += 1
                    if self.global_step % self.args.logging_steps == 0:
                        print(f"epoch {epoch} step {self.global_step} loss {tr_loss:.4f}")
                    tr_loss = 0.0
                    if self.global_step % self.args.eval_steps == 0:
                        print(self.evaluate())
        return self.log_history


def main():
    training_args = TrainingArguments()
    random.seed(training_args.seed)
    np.random.seed(training_args.seed)
    torch.manual_seed(training_args.seed)
    model_args = ModelArgs()
    rng = random.Random(training_args.seed)
    train_ds, eval_ds = make_dataset(32, model_args, rng), make_dataset(8, model_args, rng)

    model = LlamaForCausalLM(model_args)
    if training_args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    model = get_peft_model(model, LoraConfig())
    print_trainable_parameters(model)

    trainer = Trainer(model, training_args, train_ds, eval_ds)
    trainer.train()
    print(trainer.evaluate())


if __name__ == "__main__":
    main()
