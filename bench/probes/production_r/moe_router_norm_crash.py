# expect: inplace_version
# source: https://github.com/databricks/megablocks/pull/70
"""Small mixture-of-experts language model trainer in the style of megablocks.

A token-level learned router picks the top-k experts for every token, the
dropless MoE layer dispatches tokens to per-expert MLPs, and a load balancing
auxiliary loss is collected through module level bookkeeping, as in
megablocks.layers.moe.  The trainer runs a short language modelling loop on a
synthetic token stream with AdamW, warmup + cosine decay, gradient clipping and
a logging callback.
"""
import math
import dataclasses
from functools import partial
from typing import Callable, List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


def _init_normal(std: float):
    return partial(torch.nn.init.normal_, mean=0.0, std=std)


@dataclasses.dataclass
class Arguments:
    # Model arguments.
    hidden_size: int = 32
    ffn_hidden_size: int = 64
    num_layers: int = 2
    vocab_size: int = 50
    seq_len: int = 16
    # MoE arguments.
    moe_num_experts: int = 4
    moe_top_k: int = 2
    moe_loss_weight: float = 0.1
    moe_jitter_eps: Optional[float] = 0.01
    moe_normalize_expert_weights: Optional[float] = 1.0
    uniform_expert_assignment: bool = False
    init_method: Callable = dataclasses.field(default_factory=lambda: _init_normal(0.02))
    # Training.
    lr: float = 3e-3
    weight_decay: float = 0.01
    warmup_steps: int = 2
    train_steps: int = 6
    batch_size: int = 4
    clip_grad: float = 1.0
    log_interval: int = 2


# Load balancing loss bookkeeping (module level, as in megablocks.layers.moe).
_LOAD_BALANCING_LOSS = []


def save_load_balancing_loss(loss):
    global _LOAD_BALANCING_LOSS
    _LOAD_BALANCING_LOSS.append(loss)


def get_load_balancing_loss():
    return _LOAD_BALANCING_LOSS


def clear_load_balancing_loss():
    _LOAD_BALANCING_LOSS.clear()


def batched_load_balancing_loss(args: Arguments):
    tokens_per_expert, expert_scores = zip(*get_load_balancing_loss())
    num_layers = len(tokens_per_expert)
    tokens = expert_scores[0].shape[0]
    expert_scores = torch.cat([s.mean(dim=0) for s in expert_scores])
    tokens_per_expert = torch.cat(tokens_per_expert).to(expert_scores.dtype)
    scale_numerator = args.moe_num_experts * args.moe_loss_weight
    scale_denominator = num_layers * tokens * args.moe_top_k
    scale = scale_numerator / scale_denominator
    return scale * torch.dot(tokens_per_expert, expert_scores)


# NOTE: To enable end-to-end benchmarking without convergence we
# support a flag to force the router to assign tokens uniformly
# across the experts.
class _UniformExpertAssignment(torch.autograd.Function):

    @staticmethod
    def forward(ctx, x, num_experts):
        out = torch.arange(x.numel(), dtype=x.dtype, device=x.device)
        out = torch.remainder(out, num_experts)
        return out.view(x.shape)


_uniform_expert_assignment = _UniformExpertAssignment.apply


class LearnedRouter(nn.Module):

    def __init__(self, args: Arguments):
        super().__init__()
        self.args = args
        self.layer = nn.Linear(args.hidden_size, args.moe_num_experts, bias=False)
        args.init_method(self.layer.weight)

    def jitter(self, x):
        low = 1.0 - self.args.moe_jitter_eps
        high = 1.0 + self.args.moe_jitter_eps
        noise = torch.rand(x.size(), dtype=x.dtype, device=x.device)
        return low + noise * (high - low)

    def _top_k(self, scores):
        if self.args.moe_top_k == 1:
            return scores.max(dim=-1, keepdim=True)
        return torch.topk(scores, self.args.moe_top_k, dim=-1)

    def forward(self, x):
        if self.training and self.args.moe_jitter_eps is not None:
            x = x * self.jitter(x)

        scores = self.layer(x.view(-1, x.shape[-1])).softmax(dim=-1)
        expert_weights, expert_indices = self._top_k(scores)
        if self.args.moe_normalize_expert_weights:
            expert_weights /= torch.norm(
                expert_weights, p=self.args.moe_normalize_expert_weights, dim=-1, keepdim=True)

        expert_indices = (
            _uniform_expert_assignment(expert_indices, self.args.moe_num_experts)
            if self.args.uniform_expert_assignment else expert_indices
        )
        return scores, expert_weights, expert_indices


class ExpertMLP(nn.Module):
    """All expert weights stacked in two parameters, like megablocks' MLP."""

    def __init__(self, args: Arguments):
        super().__init__()
        self.w1 = nn.Parameter(torch.empty(args.moe_num_experts, args.hidden_size, args.ffn_hidden_size))
        self.w2 = nn.Parameter(torch.empty(args.moe_num_experts, args.ffn_hidden_size, args.hidden_size))
        args.init_method(self.w1)
        args.init_method(self.w2)

    def forward(self, x, expert_idx: int):
        return F.gelu(x @ self.w1[expert_idx]) @ self.w2[expert_idx]


class MoE(nn.Module):

    def __init__(self, args: Arguments):
        super().__init__()
        self.args = args
        self.router = LearnedRouter(args)
        self.experts = ExpertMLP(args)

    def forward(self, x):
        in_shape = x.shape
        scores, expert_weights, top_experts = self.router(x)
        tokens = x.reshape(-1, in_shape[-1])
        out = torch.zeros_like(tokens)
        tokens_per_expert = torch.bincount(top_experts.flatten(), minlength=self.args.moe_num_experts)
        for e in range(self.args.moe_num_experts):
            token_idx, slot = torch.nonzero(top_experts == e, as_tuple=True)
            if token_idx.numel() == 0:
                continue
            expert_out = self.experts(tokens[token_idx], e)
            out = out.index_add(0, token_idx, expert_out * expert_weights[token_idx, slot, None])
        if self.training:
            save_load_balancing_loss((tokens_per_expert, scores))
        return out.view(in_shape)


class Block(nn.Module):

    def __init__(self, args: Arguments):
        super().__init__()
        self.ln_1 = nn.LayerNorm(args.hidden_size)
        self.attn = nn.MultiheadAttention(args.hidden_size, num_heads=4, batch_first=True)
        self.ln_2 = nn.LayerNorm(args.hidden_size)
        self.moe = MoE(args)
        mask = torch.triu(torch.ones(args.seq_len, args.seq_len, dtype=torch.bool), diagonal=1)
        self.register_buffer("causal_mask", mask, persistent=False)

    def forward(self, x):
        h = self.ln_1(x)
        T = x.shape[1]
        a, _ = self.attn(h, h, h, attn_mask=self.causal_mask[:T, :T], need_weights=False)
        x = x + a
        return x + self.moe(self.ln_2(x))


class MoELanguageModel(nn.Module):

    def __init__(self, args: Arguments):
        super().__init__()
        self.args = args
        self.wte = nn.Embedding(args.vocab_size, args.hidden_size)
        self.wpe = nn.Embedding(args.seq_len, args.hidden_size)
        self.blocks = nn.ModuleList([Block(args) for _ in range(args.num_layers)])
        self.ln_f = nn.LayerNorm(args.hidden_size)
        self.lm_head = nn.Linear(args.hidden_size, args.vocab_size, bias=False)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)[None]
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class LoggingCallback:

    def __init__(self, interval: int):
        self.interval = interval
        self.history = []

    def on_step_end(self, step: int, logs: dict):
        self.history.append(logs)
        if step % self.interval == 0:
            print(f"step {step:3d} | " + " | ".join(f"{k}={v:.4f}" for k, v in logs.items()))


def cosine_with_warmup(warmup: int, total: int):
    def fn(step):
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    return fn


class Trainer:

    def __init__(self, args: Arguments, model: MoELanguageModel, callbacks: List[LoggingCallback]):
        self.args = args
        self.model = model
        self.callbacks = callbacks
        decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
        no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": args.weight_decay},
             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, cosine_with_warmup(args.warmup_steps, args.train_steps))

    def get_batch(self, generator):
        a = self.args
        start = torch.randint(0, a.vocab_size, (a.batch_size, 1), generator=generator)
        step = torch.randint(1, 4, (a.batch_size, 1), generator=generator)
        seq = (start + step * torch.arange(a.seq_len + 1)) % a.vocab_size
        return seq[:, :-1], seq[:, 1:]

    def compute_loss(self, idx, targets):
        logits = self.model(idx)
        lm_loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        lbl = batched_load_balancing_loss(self.args)
        clear_load_balancing_loss()
        return lm_loss, lbl

    def train_step(self, idx, targets):
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        lm_loss, lbl = self.compute_loss(idx, targets)
        loss = lm_loss + lbl
        loss.backward()  # raises
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.args.clip_grad)
        self.optimizer.step()
        self.scheduler.step()
        return {"loss": loss.item(), "lm_loss": lm_loss.item(), "lbl": lbl.item(),
                "lr": self.scheduler.get_last_lr()[0]}

    @torch.no_grad()
    def evaluate(self, generator, batches: int = 2):
        self.model.eval()
        total = 0.0
        for _ in range(batches):
            idx, targets = self.get_batch(generator)
            logits = self.model(idx)
            total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)).item()
        clear_load_balancing_loss()
        return total / batches

    def fit(self):
        g = torch.Generator().manual_seed(0)
        for step in range(1, self.args.train_steps + 1):
            idx, targets = self.get_batch(g)
            logs = self.train_step(idx, targets)
            for cb in self.callbacks:
                cb.on_step_end(step, logs)
        print(f"eval loss {self.evaluate(torch.Generator().manual_seed(1)):.4f}")


def main():
    torch.manual_seed(0)
    args = Arguments()
    model = MoELanguageModel(args)
    trainer = Trainer(args, model, [LoggingCallback(args.log_interval)])
    trainer.fit()


if __name__ == "__main__":
    main()
