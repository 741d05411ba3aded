# expect: nonleaf_optimizer
# source: https://github.com/NVIDIA/Megatron-LM/issues/6212
import math
from dataclasses import dataclass
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class OptimizerConfig:
    lr: float = 1e-3
    weight_decay: float = 0.01
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    bf16: bool = True
    optimizer_cpu_offload: bool = True
    optimizer_offload_fraction: float = 1.0


def mark_keep_in_fp32(param):
    param._keep_in_fp32 = True
    return param


class SinkAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden, bias=False)
        self.proj = nn.Linear(hidden, hidden, bias=False)
        self.attn_sink = mark_keep_in_fp32(nn.Parameter(torch.zeros(heads)))

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, h // self.heads).unbind(2)
        scores = torch.einsum("bqnd,bknd->bnqk", q, k).float() / math.sqrt(h // self.heads)
        sink = self.attn_sink.view(1, -1, 1, 1).expand(b, -1, s, 1)
        probs = torch.cat([scores, sink], dim=-1).softmax(-1)[..., :-1].to(x.dtype)
        out = torch.einsum("bnqk,bknd->bqnd", probs, v).reshape(b, s, h)
        return self.proj(out)


class TinyGPT(nn.Module):
    def __init__(self, vocab=64, hidden=32, heads=4, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList([SinkAttention(hidden, heads) for _ in range(layers)])
        self.head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = x + layer(x)
        return self.head(x)


def to_float16_module(model, config):
    for p in model.parameters():
        if not getattr(p, "_keep_in_fp32", False) and config.bf16:
            p.data = p.data.to(torch.bfloat16)
    return model


class HybridDeviceOptimizer(torch.optim.Optimizer):
    def __init__(self, params, offload_fraction=1.0, cpu_optimizer_cls=torch.optim.AdamW, **kwargs):
        defaults = dict(lr=kwargs.get("lr", 1e-3), weight_decay=kwargs.get("weight_decay", 0.0))
        super().__init__(params, defaults)  # raises
        self.offload_fraction = offload_fraction
        self.sub_optimizer = cpu_optimizer_cls(self.param_groups, **kwargs)

    @torch.no_grad()
    def step(self, closure=None):
        return self.sub_optimizer.step(closure)


class DistributedOptimizer:
    def __init__(self, config, model, dp_rank=0, dp_size=1):
        self.config, self.model = config, model
        self.dp_rank, self.dp_size = dp_rank, dp_size
        self.model_float16_groups, self.model_fp32_groups = [], []
        self.shard_fp32_from_float16_groups, self.shard_fp32_groups = [], []
        self._build_model_and_main_param_groups()
        param_groups = [
            {"params": self.shard_fp32_from_float16_groups[0] + self.shard_fp32_groups[0]},
        ]
        kwargs = dict(lr=config.lr, weight_decay=config.weight_decay,
                      betas=(config.adam_beta1, config.adam_beta2))
        if config.optimizer_cpu_offload:
            self.optimizer = HybridDeviceOptimizer(param_groups, offload_fraction=config.optimizer_offload_fraction,
                                                   **kwargs)
        else:
            self.optimizer = torch.optim.AdamW(param_groups, **kwargs)

    def _param_range(self, param):
        numel = param.numel()
        per_rank = math.ceil(numel / self.dp_size)
        start = min(self.dp_rank * per_rank, numel)
        return SimpleNamespace(start=start, end=min(start + per_rank, numel))

    def _build_model_and_main_param_groups(self):
        model_float16_params, model_fp32_params = [], []
        shard_fp32_from_float16_params, shard_fp32_params = [], []
        for model_param in self.model.parameters():
            param_range = self._param_range(model_param)
            if model_param.dtype in (torch.float16, torch.bfloat16):
                shard_model_param = model_param.detach().view(-1)[param_range.start:param_range.end]
                shard_main_param = shard_model_param.clone().float()
                model_float16_params.append((model_param, param_range))
                shard_fp32_from_float16_params.append(shard_main_param)
            elif model_param.dtype == torch.float32:
                shard_model_param = model_param.view(-1)[param_range.start:param_range.end]
                model_fp32_params.append((model_param, param_range))
                shard_fp32_params.append(shard_model_param)
            else:
                raise TypeError(f"unsupported param dtype {model_param.dtype}")
        self.model_float16_groups.append(model_float16_params)
        self.model_fp32_groups.append(model_fp32_params)
        self.shard_fp32_from_float16_groups.append(shard_fp32_from_float16_params)
        self.shard_fp32_groups.append(shard_fp32_params)

    def _copy_model_grads_to_main_grads(self):
        for model_groups, shard_groups in ((self.model_float16_groups, self.shard_fp32_from_float16_groups),
                                           (self.model_fp32_groups, self.shard_fp32_groups)):
            for model_group, shard_group in zip(model_groups, shard_groups):
                for (model_param, r), shard_param in zip(model_group, shard_group):
                    shard_param.grad = model_param.main_grad.view(-1)[r.start:r.end].float()

    def _copy_main_params_to_model_params(self):
        for (model_param, r), shard_main in zip(self.model_float16_groups[0], self.shard_fp32_from_float16_groups[0]):
            model_param.data.view(-1)[r.start:r.end].copy_(shard_main)

    def step(self):
        self._copy_model_grads_to_main_grads()
        self.optimizer.step()
        self._copy_main_params_to_model_params()

    def zero_grad(self):
        for p in self.model.parameters():
            p.grad = None
            p.main_grad = None


def finalize_model_grads(model):
    for p in model.parameters():
        p.main_grad = p.grad.float() if p.grad is not None else torch.zeros_like(p, dtype=torch.float32)


def main():
    torch.manual_seed(1234)
    config = OptimizerConfig()
    model = to_float16_module(TinyGPT(), config)
    optimizer = DistributedOptimizer(config, model)
    data = torch.randint(0, 64, (16, 9), generator=torch.Generator().manual_seed(0))
    for it in range(4):
        batch = data[it * 4:(it + 1) * 4]
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), batch[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        finalize_model_grads(model)
        optimizer.step()
        print(f"iteration {it} | lm loss {loss.item():.4f} | sink {model.layers[0].attn_sink.norm().item():.5f}")


if __name__ == "__main__":
    main()
