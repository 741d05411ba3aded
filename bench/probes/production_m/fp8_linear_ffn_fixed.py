# expect: clean
# source: https://github.com/facebookexperimental/protoquant/pull/25
"""Float8 (e4m3 / e5m2) emulated training of a small feed-forward stack.

Layout follows the protoquant float8 proof of concept: float8_utils (casts and
scale computation), float8_tensor (Float8Tensor + differentiable constructor),
float8_linear (Float8Linear with scale buffers, a float8 matmul autograd
function) and a benchmark-style FFN trained for a few steps, with the fp8
model's SQNR measured against an fp32 reference copy.
"""
import copy
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

# ------------------------------------------------------------------ float8_utils.py
E4M3_EBITS, E4M3_MAX_POS = 4, 448.0
E5M2_EBITS, E5M2_MAX_POS = 5, 57344.0
# avoid division by zero when calculating scale
EPS = 1e-12
# enum without using an enum, for brevity
E4M3 = 0
E5M2 = 1


def _round_to_hfp8(val_fp, ebits, max_pos):
    """Emulated cast: clamp to the fp8 range and keep 7 - ebits mantissa bits."""
    mbits = 7 - ebits
    val = torch.clamp(val_fp, min=-max_pos, max=max_pos)
    mant, expo = torch.frexp(val)
    mant = torch.round(mant * 2 ** (mbits + 1)) / 2 ** (mbits + 1)
    return torch.ldexp(mant, expo)


def float32_to_float8(x, flavor):
    if flavor == E4M3:
        return _round_to_hfp8(x, E4M3_EBITS, E4M3_MAX_POS)
    else:  # e5m2
        return _round_to_hfp8(x, E5M2_EBITS, E5M2_MAX_POS)


def float8_to_float32(x, flavor):
    # the emulated bits are already stored as fp32 values on the fp8 grid
    return x.clone()


@torch.no_grad()
def amax_to_scale(amax, flavor):
    if flavor == E4M3:
        return E4M3_MAX_POS / torch.clamp(amax, min=EPS)
    else:  # e5m2
        return E5M2_MAX_POS / torch.clamp(amax, min=EPS)


@torch.no_grad()
def tensor_to_scale(x, flavor):
    amax = torch.max(torch.abs(x))
    return amax_to_scale(amax, flavor)


def compute_error(x, y):
    Ps = torch.norm(x)
    Pn = torch.norm(x - y)
    return 20 * torch.log10(Ps / Pn)


# ------------------------------------------------------------------ float8_tensor.py
class Float8ConstrFunc(torch.autograd.Function):
    """A differentiable conversion from fp32 to fp8 (straight-through in backward)."""

    @staticmethod
    def forward(ctx, tensor, scale, flavor=E4M3):
        tensor_scaled = tensor * scale
        return float32_to_float8(tensor_scaled, flavor)

    @staticmethod
    def backward(ctx, g):
        return g, None, None


class Float8Tensor:
    """Bundles raw (emulated) fp8 data with its scale and flavor."""

    def __init__(self, data, scale, flavor):
        assert scale.nelement() == 1
        self._data = data
        self._scale = scale
        self._flavor = flavor

    def to_float32(self):
        return float8_to_float32(self._data, self._flavor) / self._scale

    @classmethod
    def from_float32(cls, tensor, scale, flavor):
        return cls(Float8ConstrFunc.apply(tensor, scale, flavor), scale, flavor)


# ------------------------------------------------------------------ float8_linear.py
class float8_linear_no_bias(torch.autograd.Function):
    """Like F.linear, but with X, W, and Y in float8."""

    @staticmethod
    def forward(ctx, x_data, x_scale, w_data, w_scale, fp8_s_out, fp8_s_dL_dX, fp8_s_dL_dW, fp8_s_dL_dY):
        ctx.save_for_backward(x_data, x_scale, w_data, w_scale, fp8_s_dL_dX, fp8_s_dL_dW, fp8_s_dL_dY)
        res = (x_data / x_scale) @ (w_data / w_scale).t()
        res_bits = float32_to_float8(res * fp8_s_out, E4M3)
        return res_bits / fp8_s_out

    @staticmethod
    def backward(ctx, go):
        x_data, x_scale, w_data, w_scale, s_dL_dX, s_dL_dW, s_dL_dY = ctx.saved_tensors
        # TODO(future): switch to delayed scaling
        s_dL_dY.fill_(tensor_to_scale(go, E5M2))
        go_fp8 = float32_to_float8(go * s_dL_dY, E5M2) / s_dL_dY
        dL_dX = go_fp8 @ (w_data / w_scale)
        s_dL_dX.fill_(tensor_to_scale(dL_dX, E5M2))
        dL_dX = float32_to_float8(dL_dX * s_dL_dX, E5M2) / s_dL_dX
        dL_dW = go_fp8.t() @ (x_data / x_scale)
        s_dL_dW.fill_(tensor_to_scale(dL_dW, E5M2))
        dL_dW = float32_to_float8(dL_dW * s_dL_dW, E5M2) / s_dL_dW
        return dL_dX, None, dL_dW, None, None, None, None, None


class Float8Linear(nn.Linear):
    """A wrapper around nn.Linear which does fp8 compute and keeps its scales in
    buffers, as a placeholder for delayed scaling or PTQ calibration."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name in ("fp8_s_in", "fp8_s_weight", "fp8_s_out", "fp8_s_dL_dX", "fp8_s_dL_dW", "fp8_s_dL_dY"):
            self.register_buffer(name, torch.tensor(1.0))

    def forward(self, x):
        # TODO(future): switch to delayed scaling
        self.fp8_s_in.fill_(tensor_to_scale(x, E4M3))
        x_fp8 = Float8Tensor.from_float32(x, self.fp8_s_in, E4M3)

        self.fp8_s_weight.fill_(tensor_to_scale(self.weight, E4M3))
        w_fp8 = Float8Tensor.from_float32(self.weight, self.fp8_s_weight, E4M3)

        return float8_linear_no_bias.apply(
            x_fp8._data, x_fp8._scale, w_fp8._data, w_fp8._scale,
            self.fp8_s_out, self.fp8_s_dL_dX, self.fp8_s_dL_dW, self.fp8_s_dL_dY)

    @classmethod
    def from_float(cls, mod):
        """Create an nn.Linear with fp8 compute from a regular nn.Linear."""
        assert mod.bias is None, "bias support not implemented yet"
        new_mod = cls(mod.in_features, mod.out_features, bias=False)
        new_mod.weight = mod.weight
        return new_mod


def swap_linear_with_float8_linear(model):
    for name, child in model.named_children():
        if type(child) is nn.Linear:
            setattr(model, name, Float8Linear.from_float(child))
        else:
            swap_linear_with_float8_linear(child)
    return model


# ------------------------------------------------------------------ benchmark/ffn.py
@dataclass
class FFNConfig:
    d_model: int = 32
    expansion: int = 4
    n_blocks: int = 2
    n_classes: int = 5
    batch_size: int = 64
    steps: int = 6
    lr: float = 3e-3
    warmup: int = 2


class FFNBlock(nn.Module):
    def __init__(self, d, expansion):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.w1 = nn.Linear(d, d * expansion, bias=False)
        self.w2 = nn.Linear(d * expansion, d, bias=False)

    def forward(self, x):
        return x + self.w2(F.relu(self.w1(self.norm(x))))


class FFN(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.blocks = nn.Sequential(*[FFNBlock(cfg.d_model, cfg.expansion) for _ in range(cfg.n_blocks)])
        self.head = nn.Linear(cfg.d_model, cfg.n_classes, bias=False)

    def forward(self, x):
        return self.head(self.blocks(x))


def make_batch(cfg, proj):
    x = torch.randn(cfg.batch_size, cfg.d_model)
    y = (x @ proj).argmax(dim=-1)
    return x, y


def warmup_cosine(step, cfg):
    if step < cfg.warmup:
        return (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def train(cfg):
    proj = torch.randn(cfg.d_model, cfg.n_classes)
    model_fp32 = FFN(cfg)
    model_fp8 = swap_linear_with_float8_linear(copy.deepcopy(model_fp32))
    optimizer = torch.optim.AdamW(model_fp8.parameters(), lr=cfg.lr, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: warmup_cosine(s, cfg))

    history = []
    for step in range(cfg.steps):
        x, y = make_batch(cfg, proj)
        logits = model_fp8(x)
        loss = F.cross_entropy(logits, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model_fp8.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        history.append(loss.item())

    with torch.no_grad():
        x, _ = make_batch(cfg, proj)
        model_fp32.load_state_dict(model_fp8.state_dict(), strict=False)
        sqnr = compute_error(model_fp32(x), model_fp8(x))
    return history, sqnr.item()


if __name__ == "__main__":
    cfg = FFNConfig()
    history, sqnr = train(cfg)
    print("losses", [round(v, 4) for v in history])
    print(f"fp8 vs fp32 SQNR: {sqnr:.2f} dB")
