# expect: clean
# shape: the twin of expert_without_tokens_skipped_crash.py that normalises the routing weights out of place: what torch.norm saved is unchanged
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
        top_w = top_w / norm
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
loss.backward()
