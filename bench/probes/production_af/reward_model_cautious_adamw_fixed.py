# expect: clean
# source: https://github.com/kyleliang919/C-Optim/issues/1
"""Pairwise reward model for RLHF, trained with a Lightning-style loop and a
"cautious" AdamW (C-AdamW: the Adam update is masked where it disagrees in sign with
the current gradient).

A small transformer encoder scores (prompt, response) token sequences; the loss is the
Bradley-Terry pairwise loss on chosen vs rejected responses.  The trainer follows
Lightning's automatic optimisation: training_step + backward are wrapped in a closure
that the optimizer calls from step(closure).  A warm-up/linear-decay schedule, a
validation accuracy callback and a checkpoint-style callback.  Synthetic token data,
CPU only.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim import Optimizer


@dataclass
class RMConfig:
    vocab_size: int = 200
    max_len: int = 24
    d_model: int = 32
    n_heads: int = 4
    n_layers: int = 2
    batch_size: int = 8
    lr: float = 3e-4
    weight_decay: float = 0.01
    warmup_steps: int = 2
    max_steps: int = 6
    val_every: int = 3


class AdamW(Optimizer):
    """AdamW with the cautious update mask (C-AdamW)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0, correct_bias=True):
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, correct_bias=correct_bias)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
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
                    bias_correction1 = 1.0 - beta1 ** state["step"]
                    bias_correction2 = 1.0 - beta2 ** state["step"]
                    step_size = step_size * math.sqrt(bias_correction2) / bias_correction1
                norm_grad = exp_avg / denom
                mask = (norm_grad * grad > 0).to(grad.dtype)
                mask = mask * (mask.numel() / (mask.sum() + 1))
                p.add_(norm_grad * mask, alpha=-step_size)
                if group["weight_decay"] > 0.0:
                    p.add_(p, alpha=(-group["lr"] * group["weight_decay"]))
        return loss


class RewardModel(nn.Module):
    def __init__(self, cfg: RMConfig):
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Parameter(torch.zeros(1, cfg.max_len, cfg.d_model))
        layer = nn.TransformerEncoderLayer(cfg.d_model, cfg.n_heads, dim_feedforward=4 * cfg.d_model,
                                           dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, cfg.n_layers)
        self.v_head = nn.Linear(cfg.d_model, 1, bias=False)

    def forward(self, input_ids, attention_mask):
        h = self.tok(input_ids) + self.pos[:, : input_ids.shape[1]]
        h = self.encoder(h, src_key_padding_mask=~attention_mask.bool())
        last = attention_mask.sum(1).long() - 1
        return self.v_head(h[torch.arange(h.shape[0]), last]).squeeze(-1)


class RewardModule(nn.Module):
    """LightningModule-like wrapper: training_step / validation_step / configure_optimizers."""

    def __init__(self, cfg: RMConfig):
        super().__init__()
        self.cfg = cfg
        self.model = RewardModel(cfg)
        self.log_dict = {}

    def log(self, name, value):
        self.log_dict[name] = float(value)

    def pairwise_loss(self, batch):
        r_chosen = self.model(batch["chosen_ids"], batch["chosen_mask"])
        r_rejected = self.model(batch["rejected_ids"], batch["rejected_mask"])
        loss = -F.logsigmoid(r_chosen - r_rejected).mean()
        acc = (r_chosen > r_rejected).float().mean()
        return loss, acc

    def training_step(self, batch, batch_idx):
        loss, acc = self.pairwise_loss(batch)
        self.log("train/loss", loss.detach())
        self.log("train/acc", acc)
        return loss

    @torch.no_grad()
    def validation_step(self, batch, batch_idx):
        loss, acc = self.pairwise_loss(batch)
        self.log("val/acc", acc)
        return acc

    def configure_optimizers(self):
        decay, no_decay = [], []
        for name, p in self.named_parameters():
            (no_decay if p.ndim < 2 or "pos" in name else decay).append(p)
        optimizer = AdamW([{"params": decay, "weight_decay": self.cfg.weight_decay},
                           {"params": no_decay, "weight_decay": 0.0}], lr=self.cfg.lr)
        warm, total = self.cfg.warmup_steps, self.cfg.max_steps
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda s: (s + 1) / warm if s < warm else max(0.0, (total - s) / (total - warm)))
        return optimizer, scheduler


def make_preference_batch(cfg: RMConfig, g):
    def sample(bias):
        lengths = torch.randint(cfg.max_len // 2, cfg.max_len + 1, (cfg.batch_size,), generator=g)
        ids = torch.randint(0, cfg.vocab_size, (cfg.batch_size, cfg.max_len), generator=g)
        ids[:, -4:] = ids[:, -4:] % 50 + bias
        mask = torch.arange(cfg.max_len)[None] < lengths[:, None]
        return ids, mask.long()
    c_ids, c_mask = sample(100)
    r_ids, r_mask = sample(0)
    return dict(chosen_ids=c_ids, chosen_mask=c_mask, rejected_ids=r_ids, rejected_mask=r_mask)


class ValidationCallback:
    def __init__(self, every, batches):
        self.every = every
        self.batches = batches
        self.history = []

    def on_train_batch_end(self, trainer, module, step):
        if (step + 1) % self.every:
            return
        module.eval()
        accs = [module.validation_step(b, i) for i, b in enumerate(self.batches)]
        module.train()
        self.history.append(float(torch.stack(accs).mean()))
        print(f"step {step + 1}: val/acc {self.history[-1]:.3f}")


class Trainer:
    """Automatic optimisation: the closure runs training_step and backward."""

    def __init__(self, max_steps, callbacks=()):
        self.max_steps = max_steps
        self.callbacks = list(callbacks)
        self.global_step = 0

    def _make_closure(self, module, optimizer, batch, batch_idx):
        def closure():
            optimizer.zero_grad()
            loss = module.training_step(batch, batch_idx)
            loss.backward()
            nn.utils.clip_grad_norm_(module.parameters(), 1.0)
            return loss
        return closure

    def fit(self, module, train_batches):
        optimizer, scheduler = module.configure_optimizers()
        module.train()
        for batch_idx, batch in enumerate(train_batches):
            if self.global_step >= self.max_steps:
                break
            closure = self._make_closure(module, optimizer, batch, batch_idx)
            optimizer.step(closure=closure)
            scheduler.step()
            for cb in self.callbacks:
                cb.on_train_batch_end(self, module, self.global_step)
            self.global_step += 1
        return module.log_dict


def main():
    torch.manual_seed(0)
    cfg = RMConfig()
    g = torch.Generator().manual_seed(0)
    train_batches = [make_preference_batch(cfg, g) for _ in range(cfg.max_steps)]
    val_batches = [make_preference_batch(cfg, g) for _ in range(2)]
    module = RewardModule(cfg)
    trainer = Trainer(cfg.max_steps, callbacks=[ValidationCallback(cfg.val_every, val_batches)])
    logs = trainer.fit(module, train_batches)
    print({k: round(v, 4) for k, v in logs.items()})


if __name__ == "__main__":
    main()
