# expect: leaf_inplace
# source: https://github.com/huggingface/transformers/issues/40488
"""LoRA fine-tuning of a (tiny) Voxtral-style audio-language model.

Condensed from transformers' modeling_voxtral.py plus the PEFT pieces used by the report:
a Whisper-like audio encoder and projector produce audio embeddings that replace the
audio placeholder tokens in the text embeddings of a Llama-like decoder.  LoRA adapters
are put on the attention projections; the base model (embeddings included) is frozen and
gradient checkpointing is on, as in the reporter's training script.  Random weights and
synthetic log-mel features.
"""
import math
from dataclasses import dataclass, field
from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

torch.manual_seed(0)


@dataclass
class VoxtralAudioConfig:
    num_mel_bins: int = 16
    hidden_size: int = 32
    num_layers: int = 1
    num_heads: int = 4
    intermediate_size: int = 128  # hidden_size * downsample factor fed to the projector


@dataclass
class LlamaTextConfig:
    vocab_size: int = 64
    hidden_size: int = 48
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    intermediate_size: int = 96


@dataclass
class VoxtralConfig:
    audio_config: VoxtralAudioConfig = field(default_factory=VoxtralAudioConfig)
    text_config: LlamaTextConfig = field(default_factory=LlamaTextConfig)
    audio_token_id: int = 3
    pad_token_id: int = 0


class Attention(nn.Module):
    def __init__(self, hidden, heads, causal):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.q_proj, self.k_proj = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.v_proj, self.o_proj = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (p(x).view(b, t, self.heads, -1).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, hidden, heads, ffn, causal):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.self_attn = Attention(hidden, heads, causal)
        self.mlp = nn.Sequential(nn.Linear(hidden, ffn), nn.GELU(), nn.Linear(ffn, hidden))

    def forward(self, x):
        x = x + self.self_attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VoxtralEncoder(nn.Module):
    def __init__(self, config: VoxtralAudioConfig):
        super().__init__()
        self.conv1 = nn.Conv1d(config.num_mel_bins, config.hidden_size, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(config.hidden_size, config.hidden_size, kernel_size=3, stride=2, padding=1)
        self.layers = nn.ModuleList(Block(config.hidden_size, config.num_heads, 2 * config.hidden_size, False)
                                    for _ in range(config.num_layers))
        self.layer_norm = nn.LayerNorm(config.hidden_size)

    def forward(self, input_features):
        x = F.gelu(self.conv2(F.gelu(self.conv1(input_features)))).transpose(1, 2)
        for layer in self.layers:
            x = layer(x)
        return self.layer_norm(x)


class VoxtralMultiModalProjector(nn.Module):
    def __init__(self, config: VoxtralConfig):
        super().__init__()
        self.linear_1 = nn.Linear(config.audio_config.intermediate_size, config.text_config.hidden_size, bias=False)
        self.linear_2 = nn.Linear(config.text_config.hidden_size, config.text_config.hidden_size, bias=False)

    def forward(self, audio_features):
        return self.linear_2(F.gelu(self.linear_1(audio_features)))


class LlamaModel(nn.Module):
    def __init__(self, config: LlamaTextConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Block(config.hidden_size, config.num_attention_heads, config.intermediate_size, True)
                                    for _ in range(config.num_hidden_layers))
        self.norm = nn.LayerNorm(config.hidden_size)
        self.gradient_checkpointing = False

    def forward(self, inputs_embeds):
        hidden = inputs_embeds
        for layer in self.layers:
            if self.gradient_checkpointing and self.training:
                hidden = checkpoint(layer, hidden, use_reentrant=False)
            else:
                hidden = layer(hidden)
        return self.norm(hidden)


class VoxtralForConditionalGeneration(nn.Module):
    def __init__(self, config: VoxtralConfig):
        super().__init__()
        self.config = config
        self.audio_tower = VoxtralEncoder(config.audio_config)
        self.multi_modal_projector = VoxtralMultiModalProjector(config)
        self.language_model = LlamaModel(config.text_config)
        self.lm_head = nn.Linear(config.text_config.hidden_size, config.text_config.vocab_size, bias=False)
        self._require_grads_hook = None

    # --- PreTrainedModel helpers
    @property
    def is_gradient_checkpointing(self):
        return self.language_model.gradient_checkpointing

    def gradient_checkpointing_enable(self):
        self.language_model.gradient_checkpointing = True

    def get_input_embeddings(self):
        return self.language_model.embed_tokens

    def enable_input_require_grads(self):
        def make_inputs_require_grads(module, input, output):
            output.requires_grad_(True)
        self._require_grads_hook = self.get_input_embeddings().register_forward_hook(make_inputs_require_grads)

    def get_audio_embeds(self, input_features):
        audio_outputs = self.audio_tower(input_features)
        audio_hidden_states = audio_outputs.reshape(-1, self.config.audio_config.intermediate_size)
        return self.multi_modal_projector(audio_hidden_states)

    def forward(self, input_ids, input_features=None, labels=None):
        inputs_embeds = self.get_input_embeddings()(input_ids)

        if input_features is not None:
            audio_embeds = self.get_audio_embeds(input_features)

            # replace text-audio token placeholders with audio embeddings
            audio_token_mask = input_ids == self.config.audio_token_id
            inputs_embeds[audio_token_mask] = audio_embeds  # raises

        logits = self.lm_head(self.language_model(inputs_embeds))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1),
                                   ignore_index=-100)
        return loss, logits


# ------------------------------------------------------------------ minimal PEFT
@dataclass
class LoraConfig:
    r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.0
    target_modules: List[str] = field(default_factory=lambda: ["q_proj", "v_proj"])


class LoraLinear(nn.Module):
    def __init__(self, base: nn.Linear, r, alpha, dropout):
        super().__init__()
        self.base_layer, self.scaling = base, alpha / r
        self.lora_A = nn.Linear(base.in_features, r, bias=False)
        self.lora_B = nn.Linear(r, base.out_features, bias=False)
        self.lora_dropout = nn.Dropout(dropout)
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)

    def forward(self, x):
        return self.base_layer(x) + self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling


def get_peft_model(model, config: LoraConfig):
    for p in model.parameters():
        p.requires_grad_(False)
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if child_name in config.target_modules and isinstance(child, nn.Linear):
                setattr(module, child_name, LoraLinear(child, config.r, config.lora_alpha, config.lora_dropout))
    if getattr(model, "is_gradient_checkpointing", True):
        model.enable_input_require_grads()
    return model


def print_trainable_parameters(model):
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    print(f"trainable params: {trainable} || all params: {total} || trainable%: {100 * trainable / total:.2f}")


def make_batch(config, batch_size=2, frames=16, text_len=6):
    n_audio = frames // 2 * config.audio_config.hidden_size // config.audio_config.intermediate_size
    input_features = torch.randn(batch_size, config.audio_config.num_mel_bins, frames)
    text = torch.randint(4, config.text_config.vocab_size, (batch_size, text_len))
    audio_tokens = torch.full((batch_size, n_audio), config.audio_token_id)
    input_ids = torch.cat([text[:, :1], audio_tokens, text[:, 1:]], dim=1)
    labels = input_ids.clone()
    labels[input_ids == config.audio_token_id] = -100
    return {"input_ids": input_ids, "input_features": input_features, "labels": labels}


def train(num_steps=4, lr=2e-4, warmup_steps=2):
    config = VoxtralConfig()
    model = VoxtralForConditionalGeneration(config)
    model.gradient_checkpointing_enable()
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    print_trainable_parameters(model)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup_steps))
    model.train()
    for step in range(num_steps):
        batch = make_batch(config)
        loss, _ = model(**batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        print(f"step {step}: loss={loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        eval_loss, _ = model(**make_batch(config))
    print(f"eval loss={eval_loss.item():.4f}")


if __name__ == "__main__":
    train()
