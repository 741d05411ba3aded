# expect: clean
# source: https://github.com/deepspeedai/DeepSpeed/pull/4138
"""Prompt-tuning run under a DeepSpeed-style ``zero.Init`` context: while the
model is being built, the floating-point tensor constructors are wrapped so
new tensors come out directly in the training dtype (bf16) and parameters are
registered with a partition bookkeeper. A small engine then builds the
optimizer from the frozen backbone's trainable parameters plus the soft
prompt, and runs a few training steps on synthetic token batches."""
import functools
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class EngineConfig:
    vocab_size: int = 64
    d_model: int = 32
    n_prompt_tokens: int = 4
    seq_len: int = 12
    batch_size: int = 4
    lr: float = 3e-3
    steps: int = 3
    dtype: torch.dtype = torch.bfloat16
    seed: int = 0


# ------------------------------------------------------------------ zero.Init
_TENSOR_CTORS = ("zeros", "ones", "empty", "randn", "rand", "full")


def zero_wrapper_for_fp_tensor_constructor(fn, target_fp_dtype):
    @functools.wraps(fn)
    def wrapped_fn(*args, **kwargs):
        tensor = fn(*args, **kwargs)
        if tensor.is_floating_point():
            tensor = tensor.to(target_fp_dtype)
            if tensor.requires_grad:
                tensor.detach_()
                tensor.requires_grad_()
        return tensor

    return wrapped_fn


class PartitionRegistry:
    """Tracks which parameters were created under zero.Init (ds_id bookkeeping)."""

    def __init__(self):
        self.params = {}

    def register(self, module):
        for name, p in module.named_parameters(recurse=False):
            if not hasattr(p, "ds_id"):
                p.ds_id = len(self.params)
                self.params[p.ds_id] = (type(module).__name__, name, tuple(p.shape))


class Init:
    def __init__(self, dtype=torch.bfloat16, registry=None):
        self.dtype = dtype
        self.registry = registry or PartitionRegistry()
        self._orig = {}

    def __enter__(self):
        for name in _TENSOR_CTORS:
            self._orig[name] = getattr(torch, name)
            setattr(torch, name, zero_wrapper_for_fp_tensor_constructor(self._orig[name], self.dtype))
        self._orig_init = nn.Module.__init__
        return self

    def __exit__(self, *exc):
        for name, fn in self._orig.items():
            setattr(torch, name, fn)
        return False

    def post_init(self, model):
        for m in model.modules():
            for name, p in list(m.named_parameters(recurse=False)):
                if p.dtype != self.dtype:
                    p.data = p.data.to(self.dtype)
            self.registry.register(m)
        return model


# ------------------------------------------------------------------ model
class Backbone(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.mixer = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_model * 2), nn.GELU(),
                                   nn.Linear(cfg.d_model * 2, cfg.d_model))
        self.norm = nn.LayerNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size)


class SoftPromptLM(nn.Module):
    def __init__(self, cfg: EngineConfig):
        super().__init__()
        self.cfg = cfg
        self.backbone = Backbone(cfg)
        for p in self.backbone.parameters():
            p.requires_grad_(False)
        for p in self.backbone.norm.parameters():
            p.requires_grad_(True)
        # learnable prompt kept outside the module's parameter list
        self.prompt = torch.zeros(cfg.n_prompt_tokens, cfg.d_model, requires_grad=True)

    def trainable_tensors(self):
        return [self.prompt]

    def forward(self, input_ids):
        b = input_ids.size(0)
        h = self.backbone.embed(input_ids)
        h = torch.cat([self.prompt.to(h.dtype).unsqueeze(0).expand(b, -1, -1), h], dim=1)
        h = self.backbone.norm(h + self.backbone.mixer(h))
        return self.backbone.lm_head(h[:, self.cfg.n_prompt_tokens:])


# ------------------------------------------------------------------ engine
class PromptTuningEngine:
    def __init__(self, model: SoftPromptLM, cfg: EngineConfig):
        self.model, self.cfg = model, cfg
        param_groups = [
            {"params": [p for p in model.parameters() if p.requires_grad], "weight_decay": 0.01},
            {"params": model.trainable_tensors(), "weight_decay": 0.0},
        ]
        self.optimizer = torch.optim.AdamW(param_groups, lr=cfg.lr)
        self.global_step = 0

    def train_batch(self, input_ids, labels):
        logits = self.model(input_ids)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), labels.reshape(-1))
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.global_step += 1
        return loss.item()


def main():
    cfg = EngineConfig()
    torch.manual_seed(cfg.seed)
    zinit = Init(dtype=cfg.dtype)
    with zinit:
        model = SoftPromptLM(cfg)
    zinit.post_init(model)
    print(f"registered {len(zinit.registry.params)} partitioned params")
    engine = PromptTuningEngine(model, cfg)
    gen = torch.Generator().manual_seed(cfg.seed)
    for _ in range(cfg.steps):
        ids = torch.randint(0, cfg.vocab_size, (cfg.batch_size, cfg.seq_len), generator=gen)
        loss = engine.train_batch(ids, torch.roll(ids, -1, dims=1))
        print(f"step {engine.global_step}: loss={loss:.4f}")


if __name__ == "__main__":
    main()
