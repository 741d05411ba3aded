# expect: clean
# source: https://github.com/vllm-project/llm-compressor/issues/2745
import math
import re
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2)


@dataclass
class ModelArgs:
    vocab_size: int = 64
    dim: int = 32
    n_layers: int = 2
    n_heads: int = 4
    inter_dim: int = 64
    n_mtp_layers: int = 1


@dataclass
class QuantScheme:
    num_bits: int = 4
    targets: str = r".*(wq|wkv|wo|w1|w2)$"
    dampening_frac: float = 0.01


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.n_heads = args.n_heads
        self.head_dim = args.dim // args.n_heads
        self.wq = nn.Linear(args.dim, args.dim, bias=False)
        self.wkv = nn.Linear(args.dim, 2 * args.dim, bias=False)
        self.wo = nn.Linear(args.dim, args.dim, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
        k, v = self.wkv(x).view(b, s, 2, self.n_heads, self.head_dim).unbind(2)
        out = F.scaled_dot_product_attention(q, k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


class MLP(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.w1 = nn.Linear(args.dim, args.inter_dim, bias=False)
        self.w2 = nn.Linear(args.inter_dim, args.dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)))


class Block(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.attn_norm, self.attn = RMSNorm(args.dim), Attention(args)
        self.ffn_norm, self.ffn = RMSNorm(args.dim), MLP(args)

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.ffn(self.ffn_norm(x))


class MTPHead(nn.Module):
    def __init__(self, args, embed, head):
        super().__init__()
        self.embed, self.head = embed, head
        self.proj = nn.Linear(2 * args.dim, args.dim, bias=False)
        self.block = Block(args)

    def forward(self, h, next_tokens):
        return self.head(self.block(self.proj(torch.cat([h, self.embed(next_tokens)], dim=-1))))


class Transformer(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.embed = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList([Block(args) for _ in range(args.n_layers)])
        self.norm = RMSNorm(args.dim)
        self.head = nn.Linear(args.dim, args.vocab_size, bias=False)
        self.mtp = nn.ModuleList([MTPHead(args, self.embed, self.head) for _ in range(args.n_mtp_layers)])

    @torch.no_grad()
    def forward(self, tokens):
        h = self.embed(tokens)
        for layer in self.layers:
            h = layer(h)
        h = self.norm(h)
        logits = self.head(h)
        mtp_logits = [m(h[:, :-1], tokens[:, 1:]) for m in self.mtp]
        return logits, mtp_logits


def update_offload_parameter(module, name, value):
    with torch.no_grad():
        getattr(module, name).copy_(value.to(getattr(module, name).dtype))


class GPTQModifier:
    def __init__(self, scheme):
        self.scheme = scheme
        self.hessians = {}
        self.num_samples = {}
        self.handles = []

    def _calibrate_hook(self, name):
        def hook(module, args, output):
            inp = args[0].reshape(-1, args[0].shape[-1]).float()
            if not hasattr(module, "weight_scale"):
                out_features = module.weight.shape[0]
                module.register_buffer("weight_scale", torch.ones(out_features, 1))
                module.register_buffer("weight_zero_point", torch.zeros(out_features, 1))
            if name not in self.hessians:
                self.hessians[name] = torch.zeros(inp.shape[1], inp.shape[1])
                self.num_samples[name] = 0
            n = self.num_samples[name]
            self.hessians[name] = self.hessians[name] * n / (n + inp.shape[0]) + 2.0 / (n + inp.shape[0]) * inp.t() @ inp
            self.num_samples[name] = n + inp.shape[0]
        return hook

    def on_initialize(self, model):
        pattern = re.compile(self.scheme.targets)
        self.targets = {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear) and pattern.match(n)}
        for name, module in self.targets.items():
            self.handles.append(module.register_forward_hook(self._calibrate_hook(name)))

    def _quantize_weight(self, weight, hessian):
        qmax = 2 ** (self.scheme.num_bits - 1) - 1
        damp = self.scheme.dampening_frac * torch.diag(hessian).mean()
        importance = torch.diag(hessian) + damp
        scale = weight.abs().amax(dim=1, keepdim=True).clamp(min=1e-8) / qmax
        q = torch.clamp(torch.round(weight / scale), -qmax - 1, qmax)
        dq = q * scale
        err = ((weight - dq) ** 2 * importance).sum().item()
        return dq, scale, torch.zeros_like(scale), err

    def sequential_epoch_end(self):
        total_err = 0.0
        for name, module in self.targets.items():
            dq, scale, zp, err = self._quantize_weight(module.weight.detach(), self.hessians[name])
            update_offload_parameter(module, "weight", dq)
            update_offload_parameter(module, "weight_scale", scale)
            update_offload_parameter(module, "weight_zero_point", zp)
            total_err += err
        return total_err

    def on_finalize(self):
        for h in self.handles:
            h.remove()
        self.handles.clear()


def calibration_batches(args, n_batches=4, batch=4, seq=12):
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, args.vocab_size, (batch, seq), generator=g) for _ in range(n_batches)]


def nll(model, batches):
    total = 0.0
    for tokens in batches:
        logits, _ = model(tokens)
        total += F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1)).item()
    return total / len(batches)


def oneshot(model, scheme, batches):
    modifier = GPTQModifier(scheme)
    modifier.on_initialize(model)
    for tokens in batches:
        model(tokens)
    err = modifier.sequential_epoch_end()
    modifier.on_finalize()
    return err


if __name__ == "__main__":
    args = ModelArgs()
    model = Transformer(args).eval()
    batches = calibration_batches(args)
    before = nll(model, batches)
    err = oneshot(model, QuantScheme(), batches)
    after = nll(model, batches)
    print(f"nll before {before:.4f} after {after:.4f} weighted err {err:.4f}")
    print("quantized modules:", sum(1 for m in model.modules() if hasattr(m, "weight_scale")))
    print("ppl", round(math.exp(after), 3))
