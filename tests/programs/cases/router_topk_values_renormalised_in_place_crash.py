# expect: inplace_version
# shape: the twin of router_topk_values_renormalised_in_place_clean.py that renormalises the softmax output itself in place before gathering the top-k weights: softmax saved its result for the backward
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
        selected = torch.topk(routing_weights, self.top_k, dim=-1).indices
        routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        routing_weights = routing_weights.gather(1, selected)
        out = torch.zeros_like(hidden)
        for slot in range(self.top_k):
            for e, expert in enumerate(self.experts):
                mask = (selected[:, slot] == e).unsqueeze(-1).float()
                out = out + mask * routing_weights[:, slot, None] * expert(hidden)
        return out


torch.manual_seed(0)
moe = SparseMoe()
loss = moe(torch.randn(6, 8)).pow(2).mean()
loss.backward()  # raises
