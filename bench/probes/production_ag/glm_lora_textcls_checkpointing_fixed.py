# expect: clean
# source: https://github.com/zai-org/ChatGLM3/pull/846
"""LoRA fine-tuning of a small GLM-style causal LM for text classification.

Follows the structure of ChatGLM3's `finetune_hf.py`: dataclass configs for
data, PEFT and training, a `load_tokenizer_and_model` helper that freezes the
base model and injects LoRA adapters into the attention projection, gradient
checkpointing enabled on the model before training, and a trainer with
`training_step` / `evaluate`, AdamW with a linear warm-up schedule and
logging callbacks.  The label word is predicted by the frozen LM head.
Synthetic token ids, CPU.
"""
import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


@dataclass
class GLMConfig:
    vocab_size: int = 64
    hidden_size: int = 32
    num_layers: int = 2
    num_heads: int = 4
    ffn_hidden_size: int = 64
    use_cache: bool = False


@dataclass
class PeftConfig:
    peft_type: str = "LORA"
    r: int = 4
    lora_alpha: int = 8
    target_modules: list = field(default_factory=lambda: ["query_key_value"])


@dataclass
class FinetuningConfig:
    max_input_length: int = 12
    batch_size: int = 4
    max_steps: int = 4
    learning_rate: float = 5e-3
    warmup_steps: int = 1
    eval_every: int = 2
    label_token_ids: tuple = (60, 61)  # "negative", "positive"
    seed: int = 11
    peft_config: PeftConfig = field(default_factory=PeftConfig)


class LoraLinear(nn.Module):
    def __init__(self, base: nn.Linear, r, alpha):
        super().__init__()
        self.base = base
        self.lora_A = nn.Linear(base.in_features, r, bias=False)
        self.lora_B = nn.Linear(r, base.out_features, bias=False)
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)
        self.scaling = alpha / r

    def forward(self, x):
        return self.base(x) + self.lora_B(self.lora_A(x)) * self.scaling


class SelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.num_heads = cfg.num_heads
        self.query_key_value = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def forward(self, h):
        b, s, d = h.shape
        q, k, v = self.query_key_value(h).view(b, s, 3, self.num_heads, d // self.num_heads).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.dense(out.transpose(1, 2).reshape(b, s, d))


class GLMBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = nn.LayerNorm(cfg.hidden_size)
        self.self_attention = SelfAttention(cfg)
        self.post_attention_layernorm = nn.LayerNorm(cfg.hidden_size)
        self.mlp = nn.Sequential(nn.Linear(cfg.hidden_size, cfg.ffn_hidden_size), nn.GELU(),
                                 nn.Linear(cfg.ffn_hidden_size, cfg.hidden_size))

    def forward(self, h):
        h = h + self.self_attention(self.input_layernorm(h))
        return h + self.mlp(self.post_attention_layernorm(h))


class GLMTransformer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.layers = nn.ModuleList(GLMBlock(cfg) for _ in range(cfg.num_layers))
        self.final_layernorm = nn.LayerNorm(cfg.hidden_size)
        self.gradient_checkpointing = False

    def forward(self, h):
        for layer in self.layers:
            if self.gradient_checkpointing and self.training:
                h = checkpoint(layer, h, use_reentrant=True)
            else:
                h = layer(h)
        return self.final_layernorm(h)


class ChatGLMForConditionalGeneration(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.config = cfg
        self.embedding = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.encoder = GLMTransformer(cfg)
        self.output_layer = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def get_input_embeddings(self):
        return self.embedding

    def gradient_checkpointing_enable(self):
        self.encoder.gradient_checkpointing = True

    def enable_input_require_grads(self):
        def make_inputs_require_grads(module, input, output):
            output.requires_grad_(True)
        self._require_grads_hook = self.get_input_embeddings().register_forward_hook(make_inputs_require_grads)

    def forward(self, input_ids):
        return self.output_layer(self.encoder(self.embedding(input_ids)))


def get_peft_model(model, peft_config):
    for p in model.parameters():
        p.requires_grad_(False)
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if name in peft_config.target_modules and isinstance(child, nn.Linear):
                setattr(module, name, LoraLinear(child, peft_config.r, peft_config.lora_alpha))
    return model


def print_trainable_parameters(model):
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    print(f"trainable params: {trainable} || all params: {total} || trainable%: {100 * trainable / total:.2f}")


def load_tokenizer_and_model(cfg: GLMConfig, peft_config: PeftConfig):
    model = ChatGLMForConditionalGeneration(cfg)
    if peft_config is not None and peft_config.peft_type == "LORA":
        model = get_peft_model(model, peft_config)
        print_trainable_parameters(model)
    return None, model


def make_dataset(ft: FinetuningConfig, n, generator):
    ids = torch.randint(1, 50, (n, ft.max_input_length), generator=generator)
    labels = (ids[:, :4].sum(1) % 2).long()
    return ids, labels


class LoggingCallback:
    def on_log(self, step, logs):
        print(f"step {step}: " + ", ".join(f"{k}={v:.4f}" for k, v in logs.items()))


class ClassificationTrainer:
    def __init__(self, model, ft: FinetuningConfig, train_data, eval_data, callbacks=()):
        self.model = model
        self.ft = ft
        self.train_data = train_data
        self.eval_data = eval_data
        self.callbacks = list(callbacks)
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=ft.learning_rate, weight_decay=0.01)
        warm = ft.warmup_steps
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / warm) * max(0.0, 1 - s / ft.max_steps))
        self.label_ids = torch.tensor(ft.label_token_ids)

    def compute_loss(self, input_ids, labels):
        logits = self.model(input_ids)[:, -1, :]
        return F.cross_entropy(logits[:, self.label_ids], labels)

    def training_step(self, input_ids, labels):
        self.model.train()
        loss = self.compute_loss(input_ids, labels)
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad()
        return loss.detach()

    @torch.no_grad()
    def evaluate(self):
        self.model.eval()
        ids, labels = self.eval_data
        logits = self.model(ids)[:, -1, :][:, self.label_ids]
        return {"eval_acc": (logits.argmax(-1) == labels).float().mean().item()}

    def train(self):
        ids, labels = self.train_data
        bs = self.ft.batch_size
        for step in range(self.ft.max_steps):
            sl = slice((step * bs) % len(ids), (step * bs) % len(ids) + bs)
            logs = {"loss": self.training_step(ids[sl], labels[sl]).item(),
                    "lr": self.scheduler.get_last_lr()[0]}
            if (step + 1) % self.ft.eval_every == 0:
                logs.update(self.evaluate())
            for cb in self.callbacks:
                cb.on_log(step, logs)


def main():
    ft_config = FinetuningConfig()
    torch.manual_seed(ft_config.seed)
    g = torch.Generator().manual_seed(ft_config.seed)
    tokenizer, model = load_tokenizer_and_model(GLMConfig(), peft_config=ft_config.peft_config)
    train_data = make_dataset(ft_config, 16, g)
    eval_data = make_dataset(ft_config, 8, g)
    model.gradient_checkpointing_enable()
    model.enable_input_require_grads()
    trainer = ClassificationTrainer(model, ft_config, train_data, eval_data, callbacks=[LoggingCallback()])
    trainer.train()


if __name__ == "__main__":
    main()
