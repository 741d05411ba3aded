# expect: clean
# source: https://github.com/thunlp/OpenDelta/issues/79
"""Adapter (delta) tuning of a small GPT-2 style language model for sentiment
classification with a verbalizer over the LM head.

The backbone is frozen by the delta model; only the bottleneck adapters that are
inserted after every MLP block are trained.  Gradient checkpointing is switched on
from the training config to save activation memory, as in the original recipe.
"""
import argparse
import math
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def get_args():
    p = argparse.ArgumentParser()
    p.add_argument("--vocab", type=int, default=120)
    p.add_argument("--d_model", type=int, default=48)
    p.add_argument("--n_layer", type=int, default=3)
    p.add_argument("--n_head", type=int, default=4)
    p.add_argument("--seq_len", type=int, default=16)
    p.add_argument("--bottleneck_dim", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--gradient_checkpointing", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args([])


def seed_all(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class Attention(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        q = q.view(b, t, self.h, d // self.h).transpose(1, 2)
        k = k.view(b, t, self.h, d // self.h).transpose(1, 2)
        v = v.view(b, t, self.h, d // self.h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.h)
        mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.c_fc = nn.Linear(d, 4 * d)
        self.c_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = Attention(d, h)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = MLP(d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TinyGPT2LMHeadModel(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.wte = nn.Embedding(args.vocab, args.d_model)
        self.wpe = nn.Embedding(args.seq_len, args.d_model)
        self.h = nn.ModuleList([Block(args.d_model, args.n_head) for _ in range(args.n_layer)])
        self.ln_f = nn.LayerNorm(args.d_model)
        self.lm_head = nn.Linear(args.d_model, args.vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        self.gradient_checkpointing = False

    def gradient_checkpointing_enable(self):
        self.gradient_checkpointing = True

    def get_input_embeddings(self):
        return self.wte

    def enable_input_require_grads(self):
        def make_inputs_require_grads(module, inp, out):
            out.requires_grad_(True)

        self._require_grads_hook = self.get_input_embeddings().register_forward_hook(make_inputs_require_grads)

    def forward(self, input_ids):
        pos = torch.arange(input_ids.size(1)).unsqueeze(0)
        hidden = self.wte(input_ids) + self.wpe(pos)
        for block in self.h:
            if self.gradient_checkpointing and self.training:
                hidden = checkpoint(block, hidden, use_reentrant=True)
            else:
                hidden = block(hidden)
        return self.lm_head(self.ln_f(hidden))


class Adapter(nn.Module):
    def __init__(self, d, r):
        super().__init__()
        self.down = nn.Linear(d, r)
        self.up = nn.Linear(r, d)
        nn.init.zeros_(self.up.weight)
        nn.init.zeros_(self.up.bias)

    def forward(self, x):
        return x + self.up(F.relu(self.down(x)))


class AdapterModel:
    """Minimal delta model: wraps the MLP of every block with an adapter."""

    def __init__(self, backbone, bottleneck_dim):
        self.backbone = backbone
        self.deltas = nn.ModuleList()
        for block in backbone.h:
            adapter = Adapter(block.mlp.c_proj.out_features, bottleneck_dim)
            self.deltas.append(adapter)
            self._insert_after(block.mlp, adapter)
        backbone.deltas = self.deltas

    @staticmethod
    def _insert_after(module, adapter):
        module.register_forward_hook(lambda mod, inp, out: adapter(out))

    def freeze_module(self, exclude=("deltas",)):
        for name, param in self.backbone.named_parameters():
            param.requires_grad = any(key in name for key in exclude)

    def log(self):
        total = sum(p.numel() for p in self.backbone.parameters())
        trainable = sum(p.numel() for p in self.backbone.parameters() if p.requires_grad)
        print(f"trainable {trainable} / {total} ({100.0 * trainable / total:.2f}%)")


class Verbalizer:
    def __init__(self, label_words):
        self.label_words = torch.tensor(label_words)

    def process_logits(self, lm_logits):
        return lm_logits[:, -1, :].index_select(-1, self.label_words)


def make_dataset(args, n):
    g = torch.Generator().manual_seed(args.seed + n)
    ids = torch.randint(3, args.vocab, (n, args.seq_len), generator=g)
    labels = (ids[:, : args.seq_len // 2].float().mean(1) > args.vocab / 2).long()
    ids[:, -1] = 2  # mask token the verbalizer reads
    return list(zip(ids.split(args.batch_size), labels.split(args.batch_size)))


class Trainer:
    def __init__(self, args, model, verbalizer):
        self.args = args
        self.model = model
        self.verbalizer = verbalizer
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=args.lr)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: min(1.0, (s + 1) / 4))
        self.history = []

    def train_step(self, input_ids, labels):
        logits = self.verbalizer.process_logits(self.model(input_ids))
        loss = F.cross_entropy(logits, labels)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        return loss.item()

    @torch.no_grad()
    def evaluate(self, batches):
        self.model.eval()
        correct = total = 0
        for ids, labels in batches:
            pred = self.verbalizer.process_logits(self.model(ids)).argmax(-1)
            correct += (pred == labels).sum().item()
            total += labels.numel()
        return correct / max(total, 1)

    def fit(self, train, valid):
        for epoch in range(self.args.epochs):
            self.model.train()
            losses = [self.train_step(ids, y) for ids, y in train]
            acc = self.evaluate(valid)
            self.history.append((epoch, float(np.mean(losses)), acc))
            print(f"epoch {epoch} loss {np.mean(losses):.4f} acc {acc:.3f}")


def main():
    args = get_args()
    seed_all(args.seed)
    model = TinyGPT2LMHeadModel(args)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
        model.enable_input_require_grads()
    delta_model = AdapterModel(model, bottleneck_dim=args.bottleneck_dim)
    delta_model.freeze_module(exclude=["deltas"])
    delta_model.log()
    verbalizer = Verbalizer(label_words=[10, 11])
    trainer = Trainer(args, model, verbalizer)
    trainer.fit(make_dataset(args, 32), make_dataset(args, 16))


if __name__ == "__main__":
    main()
