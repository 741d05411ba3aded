# expect: grad_unused
# source: https://github.com/pytorch/pytorch/issues/73697
"""Few-shot image classification with MAML on a small Vision Transformer
(HF-ViT-like: patch embeddings, encoder blocks, pooler, classification head on the
CLS token). The inner loop adapts all backbone parameters with a functional
update, the outer loop meta-trains with Adam. Synthetic 5-way tasks built from
oriented-stripe images.
"""
import math
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
    hidden_size: int = 32
    num_layers: int = 2
    num_heads: int = 4
    num_labels: int = 5
    add_pooling_layer: bool = True


@dataclass
class MetaArgs:
    ways: int = 5
    shots: int = 2
    queries: int = 3
    fast_lr: float = 0.05
    meta_lr: float = 1e-3
    adaptation_steps: int = 1
    meta_batch_size: int = 2
    iterations: int = 3
    first_order: bool = False
    seed: int = 0


class ViTEmbeddings(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        n = (cfg.image_size // cfg.patch_size) ** 2
        self.patch = nn.Conv2d(3, cfg.hidden_size, cfg.patch_size, cfg.patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, cfg.hidden_size))
        self.position = nn.Parameter(torch.randn(1, n + 1, cfg.hidden_size) * 0.02)

    def forward(self, x):
        p = self.patch(x).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(p.size(0), -1, -1)
        return torch.cat([cls, p], 1) + self.position


class ViTLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.hidden_size), nn.LayerNorm(cfg.hidden_size)
        self.num_heads = cfg.num_heads
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.proj = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.mlp = nn.Sequential(nn.Linear(cfg.hidden_size, 2 * cfg.hidden_size), nn.GELU(),
                                 nn.Linear(2 * cfg.hidden_size, cfg.hidden_size))

    def attention(self, h):
        B, T, D = h.shape
        q, k, v = self.qkv(h).view(B, T, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.size(-1)), dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(B, T, D))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class ViTModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embeddings = ViTEmbeddings(cfg)
        self.encoder = nn.ModuleList([ViTLayer(cfg) for _ in range(cfg.num_layers)])
        self.layernorm = nn.LayerNorm(cfg.hidden_size)
        self.pooler = nn.Sequential(nn.Linear(cfg.hidden_size, cfg.hidden_size), nn.Tanh()) \
            if cfg.add_pooling_layer else None

    def forward(self, pixel_values):
        h = self.embeddings(pixel_values)
        for layer in self.encoder:
            h = layer(h)
        h = self.layernorm(h)
        pooled = self.pooler(h[:, 0]) if self.pooler is not None else None
        return h, pooled


class ViTForImageClassification(nn.Module):
    """Like HF: the classifier reads the CLS token of the last hidden state."""

    def __init__(self, cfg):
        super().__init__()
        self.vit = ViTModel(cfg)
        self.classifier = nn.Linear(cfg.hidden_size, cfg.num_labels)

    def forward(self, pixel_values):
        sequence_output, _ = self.vit(pixel_values)
        return self.classifier(sequence_output[:, 0])


class MAML:
    def __init__(self, model, lr, first_order=False):
        self.model, self.lr, self.first_order = model, lr, first_order

    def adapt(self, params, loss):
        grads = torch.autograd.grad(loss, list(params.values()),  # raises
                                    create_graph=not self.first_order)
        return {name: p - self.lr * g for (name, p), g in zip(params.items(), grads)}

    def forward(self, params, x):
        return functional_call(self.model, params, (x,))


def stripe_task(args, gen, size=16):
    angles = torch.rand(args.ways, generator=gen) * math.pi
    yy, xx = torch.meshgrid(torch.arange(size).float(), torch.arange(size).float(), indexing="ij")
    n = args.shots + args.queries
    xs, ys = [], []
    for c in range(args.ways):
        base = torch.sin(0.8 * (xx * torch.cos(angles[c]) + yy * torch.sin(angles[c])))
        imgs = base.expand(n, 3, size, size) + 0.3 * torch.randn(n, 3, size, size, generator=gen)
        xs.append(imgs)
        ys.append(torch.full((n,), c))
    x, y = torch.stack(xs), torch.stack(ys)
    return ((x[:, :args.shots].reshape(-1, 3, size, size), y[:, :args.shots].reshape(-1)),
            (x[:, args.shots:].reshape(-1, 3, size, size), y[:, args.shots:].reshape(-1)))


def fast_adapt(maml, task, steps):
    (xs, ys), (xq, yq) = task
    params = dict(maml.model.named_parameters())
    for _ in range(steps):
        params = maml.adapt(params, F.cross_entropy(maml.forward(params, xs), ys))
    logits = maml.forward(params, xq)
    return F.cross_entropy(logits, yq), (logits.argmax(1) == yq).float().mean().item()


class MetaLearner:
    def __init__(self, model_cfg, args):
        self.args = args
        self.model = ViTForImageClassification(model_cfg)
        self.maml = MAML(self.model, args.fast_lr, args.first_order)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=args.meta_lr)
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.opt, T_max=args.iterations)
        self.gen = torch.Generator().manual_seed(args.seed)
        self.callbacks = []

    def train_step(self, it):
        self.opt.zero_grad()
        errs, accs = [], []
        for _ in range(self.args.meta_batch_size):
            err, acc = fast_adapt(self.maml, stripe_task(self.args, self.gen), self.args.adaptation_steps)
            (err / self.args.meta_batch_size).backward()
            errs.append(err.item())
            accs.append(acc)
        self.opt.step()
        self.scheduler.step()
        for cb in self.callbacks:
            cb(it, float(np.mean(errs)), float(np.mean(accs)))

    def evaluate(self, n_tasks=2):
        gen = torch.Generator().manual_seed(1234)
        return float(np.mean([fast_adapt(self.maml, stripe_task(self.args, gen), 1)[1]
                              for _ in range(n_tasks)]))


def main():
    args = MetaArgs()
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    learner = MetaLearner(ViTConfig(num_labels=args.ways), args)
    learner.callbacks.append(lambda it, e, a: print(f"iter {it}: meta-train error {e:.4f} acc {a:.3f}"))
    for it in range(args.iterations):
        learner.train_step(it)
    print("meta-test acc:", round(learner.evaluate(), 3))


if __name__ == "__main__":
    main()
