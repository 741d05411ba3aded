# expect: clean
# source: https://github.com/TransformerLensOrg/TransformerLens/issues/1141
# Fine-tuning a model wrapped in a TransformerLens-style bridge with a plain torch optimizer.
from typing import Iterator, Tuple

import torch
import torch.nn as nn

torch.manual_seed(0)
D_MODEL, N_HEADS, D_HEAD, VOCAB = 32, 4, 8, 50


class HFBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj = nn.Linear(D_MODEL, N_HEADS * D_HEAD)
        self.o_proj = nn.Linear(N_HEADS * D_HEAD, D_MODEL)

    def forward(self, x):
        return x + self.o_proj(torch.tanh(self.q_proj(x)))


class HFModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D_MODEL)
        self.block = HFBlock()
        self.lm_head = nn.Linear(D_MODEL, VOCAB)

    def forward(self, ids):
        return self.lm_head(self.block(self.embed(ids)))


class TransformerBridge(nn.Module):
    def __init__(self, original_model: nn.Module):
        super().__init__()
        self.original_model = original_model

    def forward(self, ids):
        return self.original_model(ids)

    def get_params(self):
        """Return parameters in TransformerLens layout (W_Q: [n_heads, d_model, d_head], ...)."""
        blk = self.original_model.block
        return {
            "embed.W_E": self.original_model.embed.weight,
            "blocks.0.attn.W_Q": blk.q_proj.weight.T.reshape(D_MODEL, N_HEADS, D_HEAD).permute(1, 0, 2),
            "blocks.0.attn.b_Q": blk.q_proj.bias.reshape(N_HEADS, D_HEAD),
            "blocks.0.attn.W_O": blk.o_proj.weight.T.reshape(N_HEADS, D_HEAD, D_MODEL),
            "blocks.0.attn.b_O": blk.o_proj.bias,
            "unembed.W_U": self.original_model.lm_head.weight.T,
            "unembed.b_U": self.original_model.lm_head.bias,
        }

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[Tuple[str, torch.nn.Parameter]]:
        """Return the underlying (leaf) parameters; use get_params() for TL-style views."""
        yield from self.original_model.named_parameters(prefix="original_model", recurse=recurse,
                                                       remove_duplicate=remove_duplicate)

    def parameters(self, recurse: bool = True):
        for _, param in self.named_parameters():
            yield param


bridge = TransformerBridge(HFModel())
optimizer = torch.optim.AdamW(bridge.parameters(), lr=1e-4)

ids = torch.randint(0, VOCAB, (4, 12))
for step in range(5):
    logits = bridge(ids[:, :-1])
    loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(step, loss.item())
