# expect: clean
# source: https://github.com/microsoft/unilm/pull/999
"""BEATs-style audio event classifier fine-tuning.

A small re-creation of the BEATs audio pre-training backbone (fbank patch
embedding, convolutional relative position encoding, post-LN transformer
encoder) with a linear classification head, fine-tuned on synthetic
log-mel filterbank clips.  A Trainer runs train_step / evaluate with AdamW,
a warmup + cosine scheduler and simple callbacks.
"""
import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn import LayerNorm


@dataclass
class BEATsConfig:
    input_patch_size: int = 4
    embed_dim: int = 32
    encoder_embed_dim: int = 48
    encoder_layers: int = 2
    encoder_attention_heads: int = 4
    encoder_ffn_embed_dim: int = 96
    conv_pos: int = 7
    conv_pos_groups: int = 4
    dropout: float = 0.1
    layer_norm_first: bool = False
    encoder_layerdrop: float = 0.0
    num_classes: int = 5
    fbank_mean: float = 15.41663
    fbank_std: float = 6.55582


@dataclass
class TrainConfig:
    lr: float = 5e-4
    weight_decay: float = 0.01
    warmup_steps: int = 2
    total_steps: int = 8
    batch_size: int = 4
    n_frames: int = 32
    n_mels: int = 16
    seed: int = 0
    callbacks: list = field(default_factory=list)


class SamePad(nn.Module):
    def __init__(self, kernel_size):
        super().__init__()
        self.remove = 1 if kernel_size % 2 == 0 else 0

    def forward(self, x):
        if self.remove > 0:
            x = x[:, :, : -self.remove]
        return x


class TransformerSentenceEncoderLayer(nn.Module):
    def __init__(self, dim, ffn_dim, heads, dropout, layer_norm_first):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(dim, heads, dropout=dropout)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)
        self.layer_norm_first = layer_norm_first
        self.self_attn_layer_norm = LayerNorm(dim)
        self.fc1 = nn.Linear(dim, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, dim)
        self.final_layer_norm = LayerNorm(dim)

    def forward(self, x, self_attn_padding_mask=None):
        residual = x
        x, attn = self.self_attn(x, x, x, key_padding_mask=self_attn_padding_mask, need_weights=False)
        x = self.dropout1(x)
        x = residual + x
        x = self.self_attn_layer_norm(x)
        residual = x
        x = F.gelu(self.fc1(x))
        x = self.dropout2(x)
        x = self.fc2(x)
        x = self.dropout3(x)
        x = residual + x
        x = self.final_layer_norm(x)
        return x, attn


class TransformerEncoder(nn.Module):
    def __init__(self, args: BEATsConfig):
        super().__init__()
        self.dropout = args.dropout
        self.embedding_dim = args.encoder_embed_dim
        self.pos_conv = nn.Conv1d(
            self.embedding_dim,
            self.embedding_dim,
            kernel_size=args.conv_pos,
            padding=args.conv_pos // 2,
            groups=args.conv_pos_groups,
        )
        std = math.sqrt(4.0 / (args.conv_pos * self.embedding_dim))
        nn.init.normal_(self.pos_conv.weight, mean=0, std=std)
        nn.init.constant_(self.pos_conv.bias, 0)
        self.pos_conv = nn.Sequential(self.pos_conv, SamePad(args.conv_pos), nn.GELU())
        self.layers = nn.ModuleList(
            [
                TransformerSentenceEncoderLayer(
                    self.embedding_dim,
                    args.encoder_ffn_embed_dim,
                    args.encoder_attention_heads,
                    args.dropout,
                    args.layer_norm_first,
                )
                for _ in range(args.encoder_layers)
            ]
        )
        self.layer_norm_first = args.layer_norm_first
        self.layer_norm = LayerNorm(self.embedding_dim)
        self.layerdrop = args.encoder_layerdrop

    def forward(self, x, padding_mask=None):
        x = self.extract_features(x, padding_mask)
        if self.layer_norm_first:
            x = self.layer_norm(x)
        return x

    def extract_features(self, x, padding_mask=None):
        if padding_mask is not None:
            x[padding_mask] = 0

        x_conv = self.pos_conv(x.transpose(1, 2))
        x_conv = x_conv.transpose(1, 2)
        x = x.clone() + x_conv

        if not self.layer_norm_first:
            x = self.layer_norm(x)
        x = F.dropout(x, p=self.dropout, training=self.training)

        # B x T x C -> T x B x C
        x = x.transpose(0, 1)
        for layer in self.layers:
            dropout_probability = np.random.random()
            if not self.training or (dropout_probability > self.layerdrop):
                x, _ = layer(x, self_attn_padding_mask=padding_mask)
        return x.transpose(0, 1)


class BEATs(nn.Module):
    def __init__(self, cfg: BEATsConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = cfg.embed_dim
        self.post_extract_proj = nn.Linear(self.embed, cfg.encoder_embed_dim)
        self.patch_embedding = nn.Conv2d(
            1, self.embed, kernel_size=cfg.input_patch_size, stride=cfg.input_patch_size, bias=False
        )
        self.dropout_input = nn.Dropout(cfg.dropout)
        self.layer_norm = LayerNorm(self.embed)
        self.encoder = TransformerEncoder(cfg)

    def preprocess(self, fbank):
        return (fbank - self.cfg.fbank_mean) / (2 * self.cfg.fbank_std)

    def forward_padding_mask(self, features, padding_mask):
        extra = padding_mask.size(1) % features.size(1)
        if extra > 0:
            padding_mask = padding_mask[:, :-extra]
        padding_mask = padding_mask.view(padding_mask.size(0), features.size(1), -1)
        return padding_mask.all(-1)

    def extract_features(self, fbank, padding_mask: Optional[torch.Tensor] = None):
        fbank = self.preprocess(fbank).unsqueeze(1)
        features = self.patch_embedding(fbank)
        features = features.reshape(features.shape[0], features.shape[1], -1).transpose(1, 2)
        features = self.layer_norm(features)
        if padding_mask is not None:
            padding_mask = self.forward_padding_mask(features, padding_mask)
        features = self.post_extract_proj(features)
        x = self.dropout_input(features)
        x = self.encoder(x, padding_mask=padding_mask)
        return x, padding_mask


class BEATsClassifier(nn.Module):
    def __init__(self, cfg: BEATsConfig):
        super().__init__()
        self.beats = BEATs(cfg)
        self.head = nn.Linear(cfg.encoder_embed_dim, cfg.num_classes)

    def forward(self, fbank, padding_mask=None):
        x, padding_mask = self.beats.extract_features(fbank, padding_mask)
        if padding_mask is not None and padding_mask.any():
            x = x.masked_fill(padding_mask.unsqueeze(-1), 0.0)
            denom = (~padding_mask).sum(-1, keepdim=True).clamp(min=1)
            pooled = x.sum(1) / denom
        else:
            pooled = x.mean(1)
        return self.head(pooled)


def make_batch(cfg: TrainConfig, bcfg: BEATsConfig, gen):
    fbank = torch.randn(cfg.batch_size, cfg.n_frames, cfg.n_mels, generator=gen) * bcfg.fbank_std + bcfg.fbank_mean
    labels = torch.randint(0, bcfg.num_classes, (cfg.batch_size,), generator=gen)
    return fbank, labels


def warmup_cosine(warmup, total):
    def fn(step):
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1 + math.cos(math.pi * progress))
    return fn


class LossLogger:
    def on_step_end(self, trainer, step, loss):
        trainer.history.append(loss)


class Trainer:
    def __init__(self, model, cfg: TrainConfig, bcfg: BEATsConfig):
        self.model = model
        self.cfg = cfg
        self.bcfg = bcfg
        decay, no_decay = [], []
        for n, p in model.named_parameters():
            (no_decay if p.ndim == 1 else decay).append(p)
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=cfg.lr,
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, warmup_cosine(cfg.warmup_steps, cfg.total_steps)
        )
        self.criterion = nn.CrossEntropyLoss()
        self.history = []
        self.callbacks = cfg.callbacks or [LossLogger()]

    def train_step(self, fbank, labels):
        self.model.train()
        self.optimizer.zero_grad()
        logits = self.model(fbank)
        loss = self.criterion(logits, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.scheduler.step()
        return loss.item()

    @torch.no_grad()
    def evaluate(self, batches):
        self.model.eval()
        correct, total = 0, 0
        for fbank, labels in batches:
            pred = self.model(fbank).argmax(-1)
            correct += (pred == labels).sum().item()
            total += labels.numel()
        return correct / max(total, 1)

    def fit(self, gen):
        val = [make_batch(self.cfg, self.bcfg, gen) for _ in range(2)]
        for step in range(self.cfg.total_steps):
            fbank, labels = make_batch(self.cfg, self.bcfg, gen)
            loss = self.train_step(fbank, labels)
            for cb in self.callbacks:
                cb.on_step_end(self, step, loss)
        return self.evaluate(val)


def main():
    tcfg = TrainConfig()
    torch.manual_seed(tcfg.seed)
    np.random.seed(tcfg.seed)
    gen = torch.Generator().manual_seed(tcfg.seed)
    bcfg = BEATsConfig()
    model = BEATsClassifier(bcfg)
    trainer = Trainer(model, tcfg, bcfg)
    acc = trainer.fit(gen)
    print(f"final loss {trainer.history[-1]:.4f}  val acc {acc:.3f}")


if __name__ == "__main__":
    main()
