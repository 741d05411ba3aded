# expect: clean
# source: https://github.com/adambielski/siamese-triplet/issues/51
"""Switch-style mixture-of-experts encoder with a cosine router.

Tokens are routed top-1 to expert FFNs.  The router follows X-MoE: tokens are
projected to a low-dimensional routing space, L2-normalised, and scored
against L2-normalised expert embeddings with a learnable temperature.  An
auxiliary load-balancing loss (Fedus et al., 2021) keeps experts busy and
tokens above an expert's capacity are passed through on the residual path.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIG = {
    "data": {"vocab": 40, "seq_len": 12, "n_classes": 3, "n_train": 64},
    "model": {
        "d_model": 32,
        "n_heads": 4,
        "n_experts": 4,
        "d_ff": 48,
        "route_dim": 8,
        "capacity_factor": 1.25,
        "init_temp": 0.3,
    },
    "optim": {"lr": 2e-3, "weight_decay": 0.01, "aux_weight": 0.01, "clip": 1.0},
    "train": {"epochs": 2, "batch_size": 16, "seed": 11, "log_every": 2},
}


def make_dataset(vocab, seq_len, n_classes, n):
    x = torch.randint(1, vocab, (n, seq_len))
    y = (x[:, :4].sum(1) + x[:, -1]) % n_classes
    return x, y


def l2_normalize_(t, eps=1e-6):
    return t / t.norm(dim=-1, keepdim=True).clamp_min(eps)


class CosineRouter(nn.Module):
    def __init__(self, d_model, n_experts, route_dim, init_temp):
        super().__init__()
        self.proj = nn.Linear(d_model, route_dim, bias=False)
        self.expert_emb = nn.Parameter(torch.randn(n_experts, route_dim) * 0.1)
        self.log_temp = nn.Parameter(torch.tensor(math.log(init_temp)))

    def forward(self, tokens):
        h = l2_normalize_(self.proj(tokens))
        e = F.normalize(self.expert_emb, dim=-1)
        return h @ e.t() / self.log_temp.exp().clamp(min=0.01)


class ExpertFFN(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w1 = nn.Linear(d_model, d_ff)
        self.w2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.w2(F.gelu(self.w1(x)))


class SwitchMoE(nn.Module):
    def __init__(self, d_model, n_experts, d_ff, route_dim, capacity_factor, init_temp):
        super().__init__()
        self.n_experts = n_experts
        self.capacity_factor = capacity_factor
        self.router = CosineRouter(d_model, n_experts, route_dim, init_temp)
        self.experts = nn.ModuleList([ExpertFFN(d_model, d_ff) for _ in range(n_experts)])
        self.last_stats = {}

    def load_balancing_loss(self, probs, expert_idx):
        density = F.one_hot(expert_idx, self.n_experts).float().mean(0)
        density_proxy = probs.mean(0)
        return self.n_experts * (density * density_proxy).sum()

    def forward(self, x):
        B, T, D = x.shape
        tokens = x.reshape(B * T, D)
        logits = self.router(tokens)
        probs = F.softmax(logits, dim=-1)
        gate, expert_idx = probs.max(dim=-1)
        capacity = int(self.capacity_factor * tokens.size(0) / self.n_experts)
        out = torch.zeros_like(tokens)
        dropped = 0
        for e, expert in enumerate(self.experts):
            sel = (expert_idx == e).nonzero(as_tuple=True)[0]
            if sel.numel() > capacity:
                dropped += sel.numel() - capacity
                sel = sel[:capacity]
            if sel.numel() == 0:
                continue
            out = out.index_add(0, sel, gate[sel, None] * expert(tokens[sel]))
        aux = self.load_balancing_loss(probs, expert_idx)
        self.last_stats = {
            "load": torch.bincount(expert_idx, minlength=self.n_experts).tolist(),
            "dropped": dropped,
        }
        return out.view(B, T, D), aux


class MoEEncoderLayer(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.attn = nn.MultiheadAttention(m["d_model"], m["n_heads"], batch_first=True)
        self.ln1 = nn.LayerNorm(m["d_model"])
        self.ln2 = nn.LayerNorm(m["d_model"])
        self.moe = SwitchMoE(m["d_model"], m["n_experts"], m["d_ff"], m["route_dim"],
                             m["capacity_factor"], m["init_temp"])

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        moe_out, aux = self.moe(self.ln2(x))
        return x + moe_out, aux


class MoEClassifier(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, m = cfg["data"], cfg["model"]
        self.embed = nn.Embedding(d["vocab"], m["d_model"])
        self.pos = nn.Parameter(torch.zeros(1, d["seq_len"], m["d_model"]))
        self.layer = MoEEncoderLayer(m)
        self.norm = nn.LayerNorm(m["d_model"])
        self.cls = nn.Linear(m["d_model"], d["n_classes"])

    def forward(self, ids):
        x = self.embed(ids) + self.pos
        x, aux = self.layer(x)
        return self.cls(self.norm(x).mean(1)), aux


def build_optimizer(model, o):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim < 2 or "norm" in name or "log_temp" in name else decay).append(p)
    return torch.optim.AdamW([
        {"params": decay, "weight_decay": o["weight_decay"]},
        {"params": no_decay, "weight_decay": 0.0}], lr=o["lr"])


def train(cfg):
    torch.manual_seed(cfg["train"]["seed"])
    x, y = make_dataset(**{k: cfg["data"][k] for k in ("vocab", "seq_len", "n_classes")}, n=cfg["data"]["n_train"])
    model = MoEClassifier(cfg)
    opt = build_optimizer(model, cfg["optim"])
    bs = cfg["train"]["batch_size"]
    step = 0
    for epoch in range(cfg["train"]["epochs"]):
        perm = torch.randperm(x.size(0))
        for i in range(0, x.size(0), bs):
            idx = perm[i:i + bs]
            logits, aux = model(x[idx])
            ce = F.cross_entropy(logits, y[idx])
            loss = ce + cfg["optim"]["aux_weight"] * aux
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["optim"]["clip"])
            opt.step()
            step += 1
            if step % cfg["train"]["log_every"] == 0:
                stats = model.layer.moe.last_stats
                acc = (logits.argmax(-1) == y[idx]).float().mean().item()
                print(f"ep {epoch} step {step} ce {ce.item():.3f} aux {aux.item():.3f} "
                      f"acc {acc:.2f} load {stats['load']} dropped {stats['dropped']}")
    return model


if __name__ == "__main__":
    train(CONFIG)
