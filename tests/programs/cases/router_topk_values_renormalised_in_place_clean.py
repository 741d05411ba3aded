# expect: clean
# shape: a mixture-of-experts router (Mixtral's) renormalises the top-k routing weights in place: topk saves its indices, not the values it returns, so dividing the values in place breaks nothing the backward needs
import torch
import torch.nn.functional as F
from torch import nn


class SparseMoe(nn.Module):
    def __init__(self, dim=8, experts=4, top_k=2):
        super().__init__()
        self.top_k = top_k
        self.gate = nn.Linear(dim, experts, bias=False)
        self.experts = nn.ModuleList(nn.Linear(dim, dim) for _ in range(experts))

    def forward(self, hidden):
        router_logits = self.gate(hidden)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected = torch.topk(routing_weights, self.top_k, dim=-1)
        routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(hidden)
        for slot in range(self.top_k):
            for e, expert in enumerate(self.experts):
                mask = (selected[:, slot] == e).unsqueeze(-1).float()
                out = out + mask * routing_weights[:, slot, None] * expert(hidden)
        return out


torch.manual_seed(0)
moe = SparseMoe()
loss = moe(torch.randn(6, 8)).pow(2).mean()
loss.backward()
