# expect: freed_graph
# source: https://github.com/pytorch/pytorch/issues/69353
"""Gradual magnitude pruning + fake-quantised activations for a small
Transformer sequence classifier.

Masks are applied with torch.nn.utils.prune (weight = weight_orig * mask is
recomputed by a forward pre-hook), and the pruning amount follows a cubic
sparsity schedule (Zhu & Gupta, 2017).
"""
import argparse
import logging

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.utils.prune as prune

log = logging.getLogger("prune")


class FakeQuantSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale, n_bits):
        qmax = 2 ** (n_bits - 1) - 1
        return torch.clamp(torch.round(x / scale), -qmax - 1, qmax) * scale

    @staticmethod
    def backward(ctx, grad):
        return grad, None, None


class ActQuant(nn.Module):
    def __init__(self, n_bits=8, momentum=0.1):
        super().__init__()
        self.n_bits, self.momentum = n_bits, momentum
        self.register_buffer("running_absmax", torch.tensor(1.0))

    def forward(self, x):
        if self.training:
            with torch.no_grad():
                self.running_absmax.lerp_(x.abs().max(), self.momentum)
        scale = self.running_absmax / (2 ** (self.n_bits - 1) - 1)
        return FakeQuantSTE.apply(x, scale, self.n_bits)


class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, n_bits):
        super().__init__()
        self.attn = nn.MultiheadAttention(d_model, n_heads, batch_first=True)
        self.ln1 = nn.LayerNorm(d_model)
        self.ff1 = nn.Linear(d_model, d_ff)
        self.ff2 = nn.Linear(d_ff, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.aq = ActQuant(n_bits)

    def forward(self, x):
        a, _ = self.attn(x, x, x, need_weights=False)
        x = self.ln1(x + a)
        return self.ln2(x + self.ff2(self.aq(F.gelu(self.ff1(x)))))


class SeqClassifier(nn.Module):
    def __init__(self, vocab, d_model, n_heads, d_ff, n_layers, n_classes, n_bits):
        super().__init__()
        self.emb = nn.Embedding(vocab, d_model)
        self.blocks = nn.ModuleList([EncoderBlock(d_model, n_heads, d_ff, n_bits) for _ in range(n_layers)])
        self.head = nn.Linear(d_model, n_classes)

    def forward(self, tokens):
        x = self.emb(tokens)
        for blk in self.blocks:
            x = blk(x)
        return self.head(x.mean(dim=1))


def collect_prunable(model):
    """(module, tensor_name) pairs that get a magnitude mask."""
    targets = []
    for name, m in model.named_modules():
        if isinstance(m, nn.MultiheadAttention):
            targets.append((m, "in_proj_weight"))
        elif isinstance(m, nn.Linear) and not name.startswith("head"):
            targets.append((m, "weight"))
    return targets


def sparsity_at(step, cfg):
    if step < cfg.prune_start:
        return 0.0
    t = min(1.0, (step - cfg.prune_start) / max(1, cfg.prune_end - cfg.prune_start))
    return cfg.final_sparsity * (1.0 - (1.0 - t) ** 3)


def apply_pruning(targets, current, target_sparsity):
    """Prune each tensor up to `target_sparsity`, accounting for already pruned entries."""
    if target_sparsity <= current + 1e-6:
        return current
    amount = (target_sparsity - current) / (1.0 - current)
    for module, tensor_name in targets:
        prune.l1_unstructured(module, tensor_name, amount=amount)
    log.info("pruned to %.2f sparsity (%d tensors)", target_sparsity, len(targets))
    return target_sparsity


def report_sparsity(targets):
    zeros = sum(int((getattr(m, n) == 0).sum()) for m, n in targets)
    total = sum(getattr(m, n).numel() for m, n in targets)
    return zeros / max(1, total)


def train(cfg):
    torch.manual_seed(cfg.seed)
    model = SeqClassifier(cfg.vocab, cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.n_layers, cfg.n_classes, cfg.n_bits)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
    targets = collect_prunable(model)
    current = 0.0
    for step in range(cfg.steps):
        if step % cfg.prune_freq == 0:
            current = apply_pruning(targets, current, sparsity_at(step, cfg))
        tokens = torch.randint(0, cfg.vocab, (cfg.batch_size, cfg.seq_len))
        labels = (tokens[:, 0] % cfg.n_classes)
        logits = model(tokens)
        loss = F.cross_entropy(logits, labels)
        optimizer.zero_grad()
        loss.backward()  # raises
        optimizer.step()
        log.info("step %d loss %.4f sparsity %.3f", step, loss.item(), report_sparsity(targets))
    return model


def get_args():
    p = argparse.ArgumentParser()
    p.add_argument("--vocab", type=int, default=50)
    p.add_argument("--d_model", type=int, default=32)
    p.add_argument("--n_heads", type=int, default=4)
    p.add_argument("--d_ff", type=int, default=64)
    p.add_argument("--n_layers", type=int, default=2)
    p.add_argument("--n_classes", type=int, default=3)
    p.add_argument("--n_bits", type=int, default=8)
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--seq_len", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--prune_start", type=int, default=0)
    p.add_argument("--prune_end", type=int, default=4)
    p.add_argument("--prune_freq", type=int, default=2)
    p.add_argument("--final_sparsity", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args([])


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="[%(name)s] %(message)s")
    train(get_args())
