# expect: leaf_inplace
# source: https://github.com/2U1/Qwen-VL-Series-Finetune/pull/178
"""LoRA / QLoRA-style supervised fine-tuning of a small Qwen2-VL-like model.

The frozen language model gets LoRA adapters on its attention projections; the
vision tower output is merged into the token embeddings at the image placeholder
positions by a patched "mixed modality" forward. Gradient checkpointing is on,
as in the project's default SFT config. Synthetic image/text batches, CPU only.
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


@dataclass
class ModelConfig:
    vocab_size: int = 64
    hidden_size: int = 32
    num_layers: int = 2
    num_heads: int = 4
    vision_patch_dim: int = 24
    vision_hidden: int = 24
    image_token_id: int = 5
    image_tokens_per_sample: int = 4


@dataclass
class TrainingArguments:
    lora_rank: int = 4
    lora_alpha: int = 8
    lora_dropout: float = 0.0
    lora_target_modules: List[str] = field(default_factory=lambda: ["q_proj", "v_proj"])
    learning_rate: float = 2e-4
    vision_lr: float = 2e-5
    gradient_checkpointing: bool = True
    per_device_train_batch_size: int = 2
    max_steps: int = 3
    seq_len: int = 12
    seed: int = 0


class LoraLinear(nn.Module):
    def __init__(self, base: nn.Linear, r, alpha, dropout):
        super().__init__()
        self.base_layer = base
        self.lora_A = nn.Linear(base.in_features, r, bias=False)
        self.lora_B = nn.Linear(r, base.out_features, bias=False)
        self.scaling = alpha / r
        self.dropout = nn.Dropout(dropout)
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)

    def forward(self, x):
        return self.base_layer(x) + self.lora_B(self.lora_A(self.dropout(x))) * self.scaling


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.h = cfg.num_heads
        self.q_proj = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.k_proj = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.v_proj = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.o_proj = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def forward(self, x, mask):
        B, S, D = x.shape
        q = self.q_proj(x).view(B, S, self.h, -1).transpose(1, 2)
        k = self.k_proj(x).view(B, S, self.h, -1).transpose(1, 2)
        v = self.v_proj(x).view(B, S, self.h, -1).transpose(1, 2)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1]) + mask
        out = att.softmax(-1) @ v
        return self.o_proj(out.transpose(1, 2).reshape(B, S, D))


class DecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = nn.LayerNorm(cfg.hidden_size)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = nn.LayerNorm(cfg.hidden_size)
        self.mlp = nn.Sequential(nn.Linear(cfg.hidden_size, 2 * cfg.hidden_size), nn.GELU(),
                                 nn.Linear(2 * cfg.hidden_size, cfg.hidden_size))

    def forward(self, x, mask):
        x = x + self.self_attn(self.input_layernorm(x), mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class VisionTower(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.patch_embed = nn.Linear(cfg.vision_patch_dim, cfg.vision_hidden)
        self.blocks = nn.Sequential(nn.LayerNorm(cfg.vision_hidden), nn.Linear(cfg.vision_hidden, cfg.vision_hidden),
                                    nn.GELU())
        self.merger = nn.Linear(cfg.vision_hidden, cfg.hidden_size)

    def forward(self, pixel_values):
        return self.merger(self.blocks(self.patch_embed(pixel_values)))


class Qwen2VLModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.config = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(cfg) for _ in range(cfg.num_layers)])
        self.norm = nn.LayerNorm(cfg.hidden_size)
        self.visual = VisionTower(cfg)
        self.gradient_checkpointing = False

    def get_input_embeddings(self):
        return self.embed_tokens

    def get_image_features(self, pixel_values):
        return self.visual(pixel_values).reshape(-1, self.config.hidden_size)

    def run_layers(self, hidden, mask):
        for layer in self.layers:
            if self.gradient_checkpointing and self.training:
                hidden = checkpoint(layer, hidden, mask, use_reentrant=True)
            else:
                hidden = layer(hidden, mask)
        return self.norm(hidden)


def qwen2_mixed_modality_forward(self, input_ids, pixel_values=None):
    inputs_embeds = self.get_input_embeddings()(input_ids)
    B, S, H = inputs_embeds.shape
    if pixel_values is not None:
        image_embeds = self.get_image_features(pixel_values).to(inputs_embeds.dtype)
        row_idx = (input_ids.reshape(-1) == self.config.image_token_id).nonzero().squeeze(1)
        flat = inputs_embeds.view(-1, H)
        flat.index_copy_(0, row_idx, image_embeds)  # raises
        inputs_embeds = flat.view(B, S, H)
    mask = torch.full((S, S), float("-inf")).triu(1)
    return self.run_layers(inputs_embeds, mask)


def replace_qwen_2_with_mixed_modality_forward():
    Qwen2VLModel.forward = qwen2_mixed_modality_forward


class Qwen2VLForConditionalGeneration(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.model = Qwen2VLModel(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def gradient_checkpointing_enable(self):
        self.model.gradient_checkpointing = True

    def enable_input_require_grads(self):
        def make_inputs_require_grads(module, inputs, output):
            output.requires_grad_(True)
        self._require_grads_hook = self.model.get_input_embeddings().register_forward_hook(make_inputs_require_grads)

    def forward(self, input_ids, pixel_values=None, labels=None):
        hidden = self.model(input_ids, pixel_values)
        logits = self.lm_head(hidden)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1),
                                   ignore_index=-100)
        return loss, logits


def get_peft_model(model, args):
    for p in model.parameters():
        p.requires_grad_(False)
    for layer in model.model.layers:
        for name in args.lora_target_modules:
            base = getattr(layer.self_attn, name)
            setattr(layer.self_attn, name, LoraLinear(base, args.lora_rank, args.lora_alpha, args.lora_dropout))
    for p in model.model.visual.merger.parameters():
        p.requires_grad_(True)
    return model


def prepare_model_for_training(model, args):
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
        model.enable_input_require_grads()
    return model


class QwenSFTTrainer:
    def __init__(self, model, args, cfg):
        self.model = model
        self.args = args
        self.cfg = cfg
        lora = [p for n, p in model.named_parameters() if p.requires_grad and "lora_" in n]
        vis = [p for n, p in model.named_parameters() if p.requires_grad and "visual" in n]
        self.optimizer = torch.optim.AdamW([{"params": lora, "lr": args.learning_rate},
                                            {"params": vis, "lr": args.vision_lr}])
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: 1.0 - s / max(1, args.max_steps))
        self.callbacks = [self.log_callback]
        self.state = {"step": 0, "losses": []}

    def log_callback(self, state):
        if state["step"] % 2 == 0:
            print(f"step {state['step']} loss {state['losses'][-1]:.4f}")

    def make_batch(self):
        a, c = self.args, self.cfg
        ids = torch.randint(6, c.vocab_size, (a.per_device_train_batch_size, a.seq_len))
        ids[:, 1:1 + c.image_tokens_per_sample] = c.image_token_id
        pixels = torch.randn(a.per_device_train_batch_size, c.image_tokens_per_sample, c.vision_patch_dim)
        labels = ids.clone()
        labels[ids == c.image_token_id] = -100
        return {"input_ids": ids, "pixel_values": pixels, "labels": labels}

    def compute_loss(self, inputs):
        loss, _ = self.model(**inputs)
        return loss

    def training_step(self, inputs):
        self.model.train()
        loss = self.compute_loss(inputs)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in self.model.parameters() if p.requires_grad], 1.0)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad()
        return loss.detach()

    def train(self):
        for _ in range(self.args.max_steps):
            loss = self.training_step(self.make_batch())
            self.state["step"] += 1
            self.state["losses"].append(loss.item())
            for cb in self.callbacks:
                cb(self.state)
        return self.state


def main():
    cfg, args = ModelConfig(), TrainingArguments()
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    replace_qwen_2_with_mixed_modality_forward()
    model = Qwen2VLForConditionalGeneration(cfg)
    model = get_peft_model(model, args)
    model = prepare_model_for_training(model, args)
    state = QwenSFTTrainer(model, args, cfg).train()
    print("final loss", round(state["losses"][-1], 4))


if __name__ == "__main__":
    main()
