# expect: clean
# source: https://github.com/huggingface/trl/issues/801
"""Direct Preference Optimization of a small causal LM with bottleneck adapters.

Only the adapters are trained (embeddings, attention/MLP weights and the tied
output head are frozen), a frozen copy of the starting policy serves as the DPO
reference model, and activation (gradient) checkpointing is enabled on the
transformer blocks to save memory, as in the stack-llama-2 DPO recipe.
"""
import copy
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


@dataclass
class DPOConfig:
    vocab_size: int = 64
    d_model: int = 32
    n_heads: int = 4
    n_layers: int = 2
    adapter_dim: int = 8
    max_len: int = 24
    prompt_len: int = 8
    batch_size: int = 4
    beta: float = 0.1
    label_smoothing: float = 0.0
    lr: float = 5e-4
    max_steps: int = 3
    gradient_checkpointing: bool = True
    label_pad_token_id: int = -100
    seed: int = 42


class Adapter(nn.Module):
    def __init__(self, d_model, bottleneck):
        super().__init__()
        self.down = nn.Linear(d_model, bottleneck)
        self.up = nn.Linear(bottleneck, d_model)
        nn.init.zeros_(self.up.weight)
        nn.init.zeros_(self.up.bias)

    def forward(self, x):
        return x + self.up(F.gelu(self.down(x)))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = nn.MultiheadAttention(cfg.d_model, cfg.n_heads, batch_first=True)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(), nn.Linear(4 * cfg.d_model, cfg.d_model))
        self.adapter = Adapter(cfg.d_model, cfg.adapter_dim)

    def forward(self, x):
        T = x.size(1)
        causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        h = self.ln1(x)
        a, _ = self.attn(h, h, h, attn_mask=causal, need_weights=False)
        x = x + a
        x = x + self.adapter(self.mlp(self.ln2(x)))
        return x


class TinyCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.max_len, cfg.d_model)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layers)])
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight
        self.gradient_checkpointing = False

    def gradient_checkpointing_enable(self):
        self.gradient_checkpointing = True

    def get_input_embeddings(self):
        return self.wte

    def forward(self, input_ids):
        pos = torch.arange(input_ids.size(1))
        h = self.wte(input_ids) + self.wpe(pos)
        for block in self.blocks:
            if self.gradient_checkpointing and self.training:
                h = checkpoint(block, h, use_reentrant=True)
            else:
                h = block(h)
        return self.lm_head(self.ln_f(h))


def prepare_adapter_training(model, cfg):
    for name, p in model.named_parameters():
        p.requires_grad = ".adapter." in name
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()

        def make_inputs_require_grad(module, input, output):
            output.requires_grad_(True)

        model.get_input_embeddings().register_forward_hook(make_inputs_require_grad)
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    n_total = sum(p.numel() for p in model.parameters())
    print(f"trainable params: {n_train} || all params: {n_total} || trainable%: {100 * n_train / n_total:.2f}")
    return model


def make_preference_batch(cfg, g):
    B, P, L = cfg.batch_size, cfg.prompt_len, cfg.max_len
    prompt = torch.randint(2, cfg.vocab_size, (B, P), generator=g)
    chosen = torch.cat([prompt, (prompt[:, :1] + torch.arange(L - P)) % cfg.vocab_size], dim=1)
    rejected = torch.cat([prompt, torch.randint(2, cfg.vocab_size, (B, L - P), generator=g)], dim=1)

    def labels_for(ids):
        lab = ids.clone()
        lab[:, :P] = cfg.label_pad_token_id
        return lab

    return {"chosen_input_ids": chosen, "chosen_labels": labels_for(chosen),
            "rejected_input_ids": rejected, "rejected_labels": labels_for(rejected)}


class DPOTrainer:
    def __init__(self, model, ref_model, cfg):
        self.model, self.ref_model, self.cfg = model, ref_model, cfg
        self.optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr)
        self.metrics = []

    def get_batch_logps(self, logits, labels):
        labels = labels[:, 1:].clone()
        logits = logits[:, :-1, :]
        loss_mask = labels != self.cfg.label_pad_token_id
        labels[labels == self.cfg.label_pad_token_id] = 0
        per_token_logps = torch.gather(logits.log_softmax(-1), dim=2, index=labels.unsqueeze(2)).squeeze(2)
        return (per_token_logps * loss_mask).sum(-1)

    def concatenated_forward(self, model, batch):
        ids = torch.cat([batch["chosen_input_ids"], batch["rejected_input_ids"]], dim=0)
        labels = torch.cat([batch["chosen_labels"], batch["rejected_labels"]], dim=0)
        all_logits = model(ids)
        all_logps = self.get_batch_logps(all_logits, labels)
        n = batch["chosen_input_ids"].size(0)
        return all_logps[:n], all_logps[n:]

    def dpo_loss(self, pc, pr, rc, rr):
        logits = (pc - pr) - (rc - rr)
        b, ls = self.cfg.beta, self.cfg.label_smoothing
        losses = -F.logsigmoid(b * logits) * (1 - ls) - F.logsigmoid(-b * logits) * ls
        chosen_rewards = b * (pc - rc).detach()
        rejected_rewards = b * (pr - rr).detach()
        return losses, chosen_rewards, rejected_rewards

    def compute_loss(self, batch):
        policy_chosen, policy_rejected = self.concatenated_forward(self.model, batch)
        with torch.no_grad():
            ref_chosen, ref_rejected = self.concatenated_forward(self.ref_model, batch)
        losses, cr, rr = self.dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected)
        metrics = {"rewards/chosen": cr.mean().item(), "rewards/rejected": rr.mean().item(),
                   "rewards/accuracies": (cr > rr).float().mean().item()}
        return losses.mean(), metrics

    def training_step(self, batch):
        self.model.train()
        loss, metrics = self.compute_loss(batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad()
        metrics["loss"] = loss.item()
        return metrics

    def train(self):
        g = torch.Generator().manual_seed(self.cfg.seed)
        for step in range(1, self.cfg.max_steps + 1):
            m = self.training_step(make_preference_batch(self.cfg, g))
            self.metrics.append(m)
            print(f"step {step}: " + ", ".join(f"{k}={v:.4f}" for k, v in m.items()))


def main():
    cfg = DPOConfig()
    torch.manual_seed(cfg.seed)
    base = TinyCausalLM(cfg)
    ref_model = copy.deepcopy(base).eval()
    for p in ref_model.parameters():
        p.requires_grad_(False)
    model = prepare_adapter_training(base, cfg)
    trainer = DPOTrainer(model, ref_model, cfg)
    trainer.train()
    print(f"final loss {trainer.metrics[-1]['loss']:.4f} (log 2 = {math.log(2):.4f})")


if __name__ == "__main__":
    main()
