# expect: clean
# source: https://github.com/TransformerLensOrg/TransformerLens/pull/1143
"""Interpretability bridge around a HuggingFace-style GPT-2: an architecture
adapter converts weights to TransformerLens conventions (W_Q/W_K/W_V per head),
hook points cache activations, and a short fine-tuning loop trains the model
through the bridge."""
from dataclasses import dataclass
from typing import Dict, Iterator, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class BridgeConfig:
    d_model: int = 32
    n_heads: int = 4
    n_layers: int = 2
    d_vocab: int = 50
    n_ctx: int = 16
    lr: float = 1e-4
    steps: int = 3

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads


class HFAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_heads, self.d_head = cfg.n_heads, cfg.d_head
        self.c_attn = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.c_proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.c_attn(x).split(D, dim=2)
        q, k, v = (t.view(B, T, self.n_heads, self.d_head).transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(out.transpose(1, 2).reshape(B, T, D))


class HFBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.attn = HFAttention(cfg)
        self.mlp = nn.ModuleDict({"c_fc": nn.Linear(cfg.d_model, 4 * cfg.d_model),
                                  "c_proj": nn.Linear(4 * cfg.d_model, cfg.d_model)})

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp["c_proj"](F.gelu(self.mlp["c_fc"](self.ln_2(x))))


class HFGPT2(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(cfg.d_vocab, cfg.d_model), nn.Embedding(cfg.n_ctx, cfg.d_model)
        self.h = nn.ModuleList([HFBlock(cfg) for _ in range(cfg.n_layers)])
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.d_vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, input_ids):
        pos = torch.arange(input_ids.shape[1])
        x = self.wte(input_ids) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def rearrange_heads(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """'d_model (n_heads d_head) -> n_heads d_model d_head'"""
    d_model = w.shape[0]
    return w.reshape(d_model, n_heads, -1).permute(1, 0, 2)


class GPT2ArchitectureAdapter:
    def __init__(self, cfg: BridgeConfig):
        self.cfg = cfg

    def convert_block(self, i: int, block: HFBlock) -> Dict[str, torch.Tensor]:
        D, H = self.cfg.d_model, self.cfg.n_heads
        w = block.attn.c_attn.weight.T  # HF Conv1D layout: d_model x 3*d_model
        b = block.attn.c_attn.bias
        out = {}
        for j, name in enumerate("QKV"):
            out[f"blocks.{i}.attn.W_{name}"] = rearrange_heads(w[:, j * D:(j + 1) * D], H)
            out[f"blocks.{i}.attn.b_{name}"] = b[j * D:(j + 1) * D].reshape(H, -1)
        out[f"blocks.{i}.attn.W_O"] = block.attn.c_proj.weight.T.reshape(H, self.cfg.d_head, D)
        out[f"blocks.{i}.attn.b_O"] = block.attn.c_proj.bias
        out[f"blocks.{i}.mlp.W_in"] = block.mlp["c_fc"].weight.T
        out[f"blocks.{i}.mlp.b_in"] = block.mlp["c_fc"].bias
        out[f"blocks.{i}.mlp.W_out"] = block.mlp["c_proj"].weight.T
        out[f"blocks.{i}.mlp.b_out"] = block.mlp["c_proj"].bias
        out[f"blocks.{i}.ln1.w"], out[f"blocks.{i}.ln1.b"] = block.ln_1.weight, block.ln_1.bias
        out[f"blocks.{i}.ln2.w"], out[f"blocks.{i}.ln2.b"] = block.ln_2.weight, block.ln_2.bias
        return out


class TransformerBridge(nn.Module):
    def __init__(self, original_model: HFGPT2, adapter: GPT2ArchitectureAdapter, cfg: BridgeConfig):
        super().__init__()
        self.original_model, self.adapter, self.cfg = original_model, adapter, cfg
        self._cache: Dict[str, torch.Tensor] = {}
        self._hooks = []

    def get_params(self) -> Dict[str, torch.Tensor]:
        """Return parameters in TransformerLens naming and shape conventions."""
        m = self.original_model
        params = {"embed.W_E": m.wte.weight, "pos_embed.W_pos": m.wpe.weight}
        for i, block in enumerate(m.h):
            params.update(self.adapter.convert_block(i, block))
        params["ln_final.w"], params["ln_final.b"] = m.ln_f.weight, m.ln_f.bias
        params["unembed.W_U"] = m.lm_head.weight.T
        return params

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[Tuple[str, nn.Parameter]]:
        """Standard PyTorch semantics: the leaf parameters of the wrapped model."""
        return self.original_model.named_parameters(prefix, recurse, remove_duplicate)

    def tl_named_parameters(self) -> Iterator[Tuple[str, torch.Tensor]]:
        """Return named parameters in the same format as TransformerLens."""
        yield from self.get_params().items()

    def _make_hook(self, name):
        def hook(module, inputs, output):
            self._cache[name] = output.detach()
        return hook

    def run_with_cache(self, input_ids):
        self._cache = {}
        for i, block in enumerate(self.original_model.h):
            self._hooks.append(block.attn.register_forward_hook(self._make_hook(f"blocks.{i}.hook_attn_out")))
            self._hooks.append(block.register_forward_hook(self._make_hook(f"blocks.{i}.hook_resid_post")))
        try:
            logits = self.original_model(input_ids)
        finally:
            for h in self._hooks:
                h.remove()
            self._hooks = []
        return logits, dict(self._cache)

    def forward(self, input_ids):
        return self.original_model(input_ids)


def fine_tune(bridge: TransformerBridge, data: torch.Tensor, cfg: BridgeConfig):
    optimizer = torch.optim.AdamW(bridge.parameters(), lr=cfg.lr)
    for step in range(cfg.steps):
        logits = bridge(data[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, cfg.d_vocab), data[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step}: loss {loss.item():.4f}")


def main():
    torch.manual_seed(0)
    cfg = BridgeConfig()
    bridge = TransformerBridge(HFGPT2(cfg), GPT2ArchitectureAdapter(cfg), cfg)
    data = torch.randint(0, cfg.d_vocab, (4, cfg.n_ctx))
    _, cache = bridge.run_with_cache(data[:, :-1])
    print("cached:", sorted(cache)[:2], "W_Q shape:", tuple(bridge.get_params()["blocks.0.attn.W_Q"].shape))
    fine_tune(bridge, data, cfg)


if __name__ == "__main__":
    main()
