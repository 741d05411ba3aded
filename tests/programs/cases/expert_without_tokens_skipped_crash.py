# expect: inplace_version
# shape: a mixture of experts skips an expert that receives no token (`if idx.numel() == 0: continue`), and normalises the routing weights in place after `torch.norm` saved them: the output, built from the experts that got tokens, carries the saved weights, and the backward finds them modified
import torch
from torch import nn


class Router(nn.Module):
    def __init__(self, dim=8, experts=3):
        super().__init__()
        self.gate = nn.Linear(dim, experts)
        self.experts = nn.ModuleList(nn.Linear(dim, dim) for _ in range(experts))

    def forward(self, x):
        weights = torch.softmax(self.gate(x), dim=-1)
        top_w, top_i = weights.topk(2, dim=-1)
        norm = torch.norm(top_w, p=1.0, dim=-1, keepdim=True)
        top_w /= norm
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            token_idx, slot = torch.where(top_i == e)
            if token_idx.numel() == 0:
                continue
            contrib = expert(x[token_idx]) * top_w[token_idx, slot, None]
            out = out.index_add(0, token_idx, contrib)
        return out


torch.manual_seed(0)
moe = Router()
loss = moe(torch.randn(10, 8)).pow(2).mean()
loss.backward()  # raises
