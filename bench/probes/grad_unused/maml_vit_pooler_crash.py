# expect: grad_unused
# source: https://github.com/learnables/learn2learn/issues/363
"""Few-shot MAML on a small ViT backbone (pooler kept from the pretrained config)."""
import random
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call


@dataclass
class ViTConfig:
    image_size: int = 16
    patch_size: int = 4
    num_channels: int = 3
    hidden_size: int = 32
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    intermediate_size: int = 64
    add_pooling_layer: bool = True


@dataclass
class MetaConfig:
    n_ways: int = 5
    k_shots: int = 2
    k_eval: int = 3
    inner_lr: float = 0.1
    outer_lr: float = 1e-3
    adaptation_steps: int = 1
    meta_batch_size: int = 2
    iterations: int = 2
    first_order: bool = False
    seed: int = 0


class ViTEmbeddings(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.proj = nn.Conv2d(cfg.num_channels, cfg.hidden_size, cfg.patch_size, stride=cfg.patch_size)
        n_patches = (cfg.image_size // cfg.patch_size) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, cfg.hidden_size))
        self.position_embeddings = nn.Parameter(torch.randn(1, n_patches + 1, cfg.hidden_size) * 0.02)

    def forward(self, pixel_values):
        x = self.proj(pixel_values).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(x.size(0), -1, -1)
        return torch.cat([cls, x], dim=1) + self.position_embeddings


class ViTPooler(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def forward(self, hidden_states):
        return torch.tanh(self.dense(hidden_states[:, 0]))


class ViTSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.num_heads = cfg.num_attention_heads
        self.head_dim = cfg.hidden_size // cfg.num_attention_heads
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.out = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        attn = torch.softmax(q @ k.transpose(-2, -1) / self.head_dim ** 0.5, dim=-1)
        return self.out((attn @ v).transpose(1, 2).reshape(b, t, d))


class ViTLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.layernorm_before = nn.LayerNorm(cfg.hidden_size)
        self.attention = ViTSelfAttention(cfg)
        self.layernorm_after = nn.LayerNorm(cfg.hidden_size)
        self.mlp = nn.Sequential(nn.Linear(cfg.hidden_size, cfg.intermediate_size), nn.GELU(),
                                 nn.Linear(cfg.intermediate_size, cfg.hidden_size))

    def forward(self, x):
        x = x + self.attention(self.layernorm_before(x))
        return x + self.mlp(self.layernorm_after(x))


class ViTModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embeddings = ViTEmbeddings(cfg)
        self.encoder = nn.Sequential(*[ViTLayer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.layernorm = nn.LayerNorm(cfg.hidden_size)
        self.pooler = ViTPooler(cfg) if cfg.add_pooling_layer else None

    def forward(self, pixel_values):
        seq = self.layernorm(self.encoder(self.embeddings(pixel_values)))
        pooled = self.pooler(seq) if self.pooler is not None else None
        return {"last_hidden_state": seq, "pooler_output": pooled}


class ViTFewShotClassifier(nn.Module):
    def __init__(self, cfg, n_classes):
        super().__init__()
        self.vit = ViTModel(cfg)
        self.classifier = nn.Linear(cfg.hidden_size, n_classes)

    def forward(self, pixel_values):
        out = self.vit(pixel_values)
        return self.classifier(out["last_hidden_state"][:, 0])


class MAML:
    def __init__(self, model, lr, first_order=False):
        self.model = model
        self.lr = lr
        self.first_order = first_order
        self.names = [n for n, _ in model.named_parameters()]

    def init_params(self):
        return [p for p in self.model.parameters()]

    def forward(self, params, x):
        return functional_call(self.model, dict(zip(self.names, params)), (x,))

    def adapt(self, params, loss):
        gradients = torch.autograd.grad(loss, params, retain_graph=not self.first_order, create_graph=not self.first_order)  # raises
        return [p - self.lr * g for p, g in zip(params, gradients)]


def make_task(cfg, mcfg, gen):
    n = mcfg.n_ways * (mcfg.k_shots + mcfg.k_eval)
    x = torch.randn(n, cfg.num_channels, cfg.image_size, cfg.image_size, generator=gen)
    y = torch.arange(mcfg.n_ways).repeat_interleave(mcfg.k_shots + mcfg.k_eval)
    x = x + y.view(-1, 1, 1, 1).float() * 0.5
    support = torch.zeros(n, dtype=torch.bool)
    for c in range(mcfg.n_ways):
        support[c * (mcfg.k_shots + mcfg.k_eval): c * (mcfg.k_shots + mcfg.k_eval) + mcfg.k_shots] = True
    return (x[support], y[support]), (x[~support], y[~support])


def fast_adapt(maml, task, mcfg):
    (xs, ys), (xq, yq) = task
    params = maml.init_params()
    for _ in range(mcfg.adaptation_steps):
        train_error = F.cross_entropy(maml.forward(params, xs), ys)
        params = maml.adapt(params, train_error)
    logits = maml.forward(params, xq)
    acc = (logits.argmax(1) == yq).float().mean()
    return F.cross_entropy(logits, yq), acc


def main():
    cfg, mcfg = ViTConfig(), MetaConfig()
    random.seed(mcfg.seed)
    np.random.seed(mcfg.seed)
    torch.manual_seed(mcfg.seed)
    gen = torch.Generator().manual_seed(mcfg.seed)

    model = ViTFewShotClassifier(cfg, mcfg.n_ways)
    maml = MAML(model, lr=mcfg.inner_lr, first_order=mcfg.first_order)
    opt = torch.optim.Adam(model.parameters(), mcfg.outer_lr)

    for iteration in range(mcfg.iterations):
        opt.zero_grad()
        meta_err, meta_acc = 0.0, 0.0
        for _ in range(mcfg.meta_batch_size):
            evaluation_error, evaluation_accuracy = fast_adapt(maml, make_task(cfg, mcfg, gen), mcfg)
            evaluation_error.backward()
            meta_err += evaluation_error.item()
            meta_acc += evaluation_accuracy.item()
        for p in model.parameters():
            if p.grad is not None:
                p.grad.mul_(1.0 / mcfg.meta_batch_size)
        opt.step()
        print(f"iter {iteration}: meta_err={meta_err / mcfg.meta_batch_size:.4f} "
              f"meta_acc={meta_acc / mcfg.meta_batch_size:.3f}")


if __name__ == "__main__":
    main()
