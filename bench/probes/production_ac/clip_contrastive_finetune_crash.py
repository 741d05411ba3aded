# expect: no_grad_fn
# source: https://github.com/Lightning-AI/pytorch-lightning/issues/18254
"""Contrastive image-text (CLIP-style) fine-tuning with a Lightning-like loop.

A small dual encoder (conv image tower, embedding/attention text tower,
learnable temperature) is trained with the symmetric InfoNCE loss.  The loop
follows Lightning's automatic optimisation: training_step and backward run
inside a closure that is handed to optimizer.step(closure=...).  The optimizer
is the AdamW implementation vendored from Hugging Face transformers, and the
learning rate follows a linear-warmup / cosine schedule.
"""
import math
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim import Optimizer


class AdamW(Optimizer):
    """AdamW as shipped in transformers.optimization (decoupled weight decay)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0, correct_bias=True):
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, correct_bias=correct_bias)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                beta1, beta2 = group["betas"]
                state["step"] += 1
                exp_avg.mul_(beta1).add_(grad, alpha=1.0 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
                denom = exp_avg_sq.sqrt().add_(group["eps"])
                step_size = group["lr"]
                if group["correct_bias"]:
                    step_size = step_size * math.sqrt(1.0 - beta2 ** state["step"]) / (1.0 - beta1 ** state["step"])
                p.addcdiv_(exp_avg, denom, value=-step_size)
                if group["weight_decay"] > 0.0:
                    p.add_(p, alpha=(-group["lr"] * group["weight_decay"]))
        return loss


def get_cosine_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps):
    def lr_lambda(step):
        if step < num_warmup_steps:
            return float(step) / float(max(1, num_warmup_steps))
        progress = float(step - num_warmup_steps) / float(max(1, num_training_steps - num_warmup_steps))
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


class ImageTower(nn.Module):
    def __init__(self, width, embed_dim):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 2, 1), nn.GELU(), nn.Conv2d(width, width, 3, 2, 1), nn.GELU())
        self.proj = nn.Linear(width, embed_dim)

    def forward(self, images):
        return self.proj(self.stem(images).mean(dim=(2, 3)))


class TextTower(nn.Module):
    def __init__(self, vocab, width, embed_dim, context):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab, width)
        self.positional_embedding = nn.Parameter(torch.randn(context, width) * 0.01)
        self.attn = nn.MultiheadAttention(width, num_heads=2, batch_first=True)
        self.ln_final = nn.LayerNorm(width)
        self.text_projection = nn.Linear(width, embed_dim, bias=False)

    def forward(self, tokens):
        x = self.token_embedding(tokens) + self.positional_embedding
        x = x + self.attn(x, x, x, need_weights=False)[0]
        x = self.ln_final(x)
        eot = tokens.argmax(dim=-1)
        return self.text_projection(x[torch.arange(x.shape[0]), eot])


class CLIPFineTuner(nn.Module):
    """LightningModule-style wrapper: training_step / validation_step / configure_optimizers."""

    def __init__(self, hparams):
        super().__init__()
        self.hparams = hparams
        self.visual = ImageTower(hparams.width, hparams.embed_dim)
        self.textual = TextTower(hparams.vocab, hparams.width, hparams.embed_dim, hparams.context)
        self.logit_scale = nn.Parameter(torch.ones([]) * math.log(1 / 0.07))

    def encode(self, images, tokens):
        img = F.normalize(self.visual(images), dim=-1)
        txt = F.normalize(self.textual(tokens), dim=-1)
        return img, txt

    def clip_loss(self, img, txt):
        logits_per_image = self.logit_scale.exp().clamp(max=100) * img @ txt.t()
        labels = torch.arange(img.shape[0])
        return 0.5 * (F.cross_entropy(logits_per_image, labels) + F.cross_entropy(logits_per_image.t(), labels))

    def training_step(self, batch, batch_idx):
        images, tokens = batch
        img, txt = self.encode(images, tokens)
        return self.clip_loss(img, txt)

    @torch.no_grad()
    def validation_step(self, batch):
        images, tokens = batch
        img, txt = self.encode(images, tokens)
        acc = (img @ txt.t()).argmax(dim=1).eq(torch.arange(img.shape[0])).float().mean()
        return {"val_loss": self.clip_loss(img, txt).item(), "val_acc": acc.item()}

    def configure_optimizers(self):
        decay = [p for n, p in self.named_parameters() if p.ndim >= 2]
        no_decay = [p for n, p in self.named_parameters() if p.ndim < 2]
        opt = AdamW([{"params": decay, "weight_decay": self.hparams.weight_decay},
                     {"params": no_decay, "weight_decay": 0.0}], lr=self.hparams.lr)
        sched = get_cosine_schedule_with_warmup(opt, self.hparams.warmup, self.hparams.max_steps)
        return opt, sched


class LearningRateMonitor:
    def on_train_batch_end(self, trainer, step, loss):
        lr = trainer.optimizer.param_groups[0]["lr"]
        trainer.logged.append((step, round(lr, 6), round(loss, 4)))


class MiniTrainer:
    """Automatic optimisation the way Lightning runs it: step(closure)."""

    def __init__(self, max_steps, callbacks=()):
        self.max_steps = max_steps
        self.callbacks = list(callbacks)
        self.logged = []

    def _make_closure(self, module, batch, batch_idx):
        def closure():
            loss = module.training_step(batch, batch_idx)
            self.optimizer.zero_grad()
            loss.backward()  # raises
            return loss
        return closure

    def fit(self, module, train_batches, val_batch):
        self.optimizer, self.scheduler = module.configure_optimizers()
        module.train()
        for step in range(self.max_steps):
            batch = train_batches[step % len(train_batches)]
            loss = self.optimizer.step(closure=self._make_closure(module, batch, step))
            self.scheduler.step()
            for cb in self.callbacks:
                cb.on_train_batch_end(self, step, loss.item())
        module.eval()
        return module.validation_step(val_batch)


def synthetic_pairs(n_batches, batch, hp, seed=0):
    """Images whose colour statistics are tied to the caption tokens."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n_batches):
        tokens = torch.randint(1, hp.vocab - 1, (batch, hp.context), generator=g)
        tokens[:, -1] = hp.vocab - 1  # end-of-text token has the largest id
        colour = (tokens[:, :3].float() / hp.vocab).view(batch, 3, 1, 1)
        images = colour + 0.1 * torch.randn(batch, 3, 16, 16, generator=g)
        out.append((images, tokens))
    return out


def main():
    hp = SimpleNamespace(width=32, embed_dim=16, vocab=20, context=6, lr=5e-3,
                         weight_decay=0.1, warmup=2, max_steps=8, batch_size=8)
    torch.manual_seed(0)
    data = synthetic_pairs(4, hp.batch_size, hp)
    module = CLIPFineTuner(hp)
    trainer = MiniTrainer(hp.max_steps, callbacks=[LearningRateMonitor()])
    metrics = trainer.fit(module, data[:3], data[3])
    print("lr/loss log", trainer.logged)
    print("validation", metrics)


if __name__ == "__main__":
    main()
