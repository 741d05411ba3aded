# expect: grad_unused
# source: https://github.com/pyg-team/pytorch_geometric/issues/8496
"""Explaining a heterogeneous graph transformer (HGT) with integrated gradients
over per-edge-type edge masks (PyG Explainer / CaptumExplainer style).

The model is trained for graph-level regression on a small synthetic
author/paper graph; the explainer then injects one soft mask per edge type into
every message-passing layer and integrates gradients of the prediction with
respect to those masks. CPU only.
"""
import math
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

NODE_TYPES = ["author", "paper"]
EDGE_TYPES = [("author", "writes", "paper"), ("paper", "rev_writes", "author"), ("paper", "cites", "paper")]


class MessagePassing(nn.Module):
    """Base class: aggregates messages and applies explanation edge masks."""

    def __init__(self):
        super().__init__()
        self._explain = False
        self._edge_mask = {}

    def explain_message(self, msg, edge_type):
        if self._explain and edge_type in self._edge_mask:
            return msg * self._edge_mask[edge_type].sigmoid().view(-1, *([1] * (msg.dim() - 1)))
        return msg

    def propagate(self, edge_index, msg, num_dst, edge_type=None):
        msg = self.explain_message(msg, edge_type)
        return torch.zeros(num_dst, *msg.shape[1:]).index_add(0, edge_index[1], msg)


class HGTConv(MessagePassing):
    def __init__(self, channels, heads=2):
        super().__init__()
        self.heads, self.d = heads, channels // heads
        self.kqv = nn.ModuleDict({t: nn.Linear(channels, 3 * channels) for t in NODE_TYPES})
        self.out = nn.ModuleDict({t: nn.Linear(channels, channels) for t in NODE_TYPES})
        self.k_rel = nn.ParameterDict({"__".join(et): nn.Parameter(torch.eye(self.d).repeat(heads, 1, 1))
                                       for et in EDGE_TYPES})
        self.p_rel = nn.ParameterDict({"__".join(et): nn.Parameter(torch.ones(heads)) for et in EDGE_TYPES})
        self.skip = nn.ParameterDict({t: nn.Parameter(torch.tensor(1.0)) for t in NODE_TYPES})

    def _offsets(self, x_dict):
        off, cur = {}, 0
        for t in NODE_TYPES:
            off[t] = cur
            cur += x_dict[t].shape[0]
        return off, cur

    def forward(self, x_dict, edge_index_dict):
        H, D = self.heads, self.d
        k, q, v = {}, {}, {}
        for t, x in x_dict.items():
            k[t], q[t], v[t] = self.kqv[t](x).view(-1, 3, H, D).unbind(1)
        off, total = self._offsets(x_dict)
        # one omnibus edge index over all relation types
        src_k, src_v, dst_q, omni_index = [], [], [], []
        for et in EDGE_TYPES:
            s, _, d = et
            ei = edge_index_dict[et]
            key = "__".join(et)
            src_k.append(torch.einsum("ehd,hdf->ehf", k[s][ei[0]], self.k_rel[key]) * self.p_rel[key].view(1, H, 1))
            src_v.append(v[s][ei[0]])
            dst_q.append(q[d][ei[1]])
            omni_index.append(torch.stack([ei[0] + off[s], ei[1] + off[d]]))
        K, V, Q = torch.cat(src_k), torch.cat(src_v), torch.cat(dst_q)
        omni_index = torch.cat(omni_index, dim=1)
        alpha = (Q * K).sum(-1) / math.sqrt(D)
        alpha = (alpha - alpha.max()).exp()
        denom = torch.zeros(total, H).index_add(0, omni_index[1], alpha)[omni_index[1]]
        msg = V * (alpha / (denom + 1e-16)).unsqueeze(-1)
        agg = self.propagate(omni_index, msg, total).view(total, H * D)
        out = {}
        for t in NODE_TYPES:
            a = F.gelu(agg[off[t]: off[t] + x_dict[t].shape[0]])
            beta = self.skip[t].sigmoid()
            out[t] = beta * self.out[t](a) + (1 - beta) * x_dict[t]
        return out


class HGT(nn.Module):
    def __init__(self, in_dims, hidden=16, layers=2, heads=2):
        super().__init__()
        self.lin = nn.ModuleDict({t: nn.Linear(d, hidden) for t, d in in_dims.items()})
        self.convs = nn.ModuleList([HGTConv(hidden, heads) for _ in range(layers)])
        self.head = nn.Linear(hidden, 1)

    def forward(self, x_dict, edge_index_dict):
        x_dict = {t: F.relu(self.lin[t](x)) for t, x in x_dict.items()}
        for conv in self.convs:
            x_dict = conv(x_dict, edge_index_dict)
        return self.head(x_dict["paper"].mean(0, keepdim=True))


def set_hetero_masks(model, edge_mask_dict):
    for m in model.modules():
        if isinstance(m, MessagePassing):
            m._explain = True
            m._edge_mask = edge_mask_dict


def clear_masks(model):
    for m in model.modules():
        if isinstance(m, MessagePassing):
            m._explain, m._edge_mask = False, {}


class CaptumEdgeExplainer:
    """Integrated gradients over per-edge-type edge masks."""

    def __init__(self, model, n_steps=8):
        self.model, self.n_steps = model, n_steps

    def attribute(self, x_dict, edge_index_dict):
        masks = {et: torch.ones(edge_index_dict[et].shape[1]) for et in EDGE_TYPES}
        total = {et: torch.zeros_like(m) for et, m in masks.items()}
        for alpha in torch.linspace(1.0 / self.n_steps, 1.0, self.n_steps):
            scaled = {et: (alpha * m).requires_grad_(True) for et, m in masks.items()}
            set_hetero_masks(self.model, scaled)
            out = self.model(x_dict, edge_index_dict).sum()
            grads = torch.autograd.grad(out, [scaled[et] for et in EDGE_TYPES])  # raises
            for et, g in zip(EDGE_TYPES, grads):
                total[et] += g / self.n_steps
            clear_masks(self.model)
        return {et: total[et] * masks[et] for et in EDGE_TYPES}


def make_data(n_author=6, n_paper=8, dim=5):
    x_dict = {"author": torch.randn(n_author, dim), "paper": torch.randn(n_paper, dim)}
    writes = torch.stack([torch.randint(0, n_author, (12,)), torch.randint(0, n_paper, (12,))])
    cites = torch.stack([torch.randint(0, n_paper, (10,)), torch.randint(0, n_paper, (10,))])
    edge_index_dict = {EDGE_TYPES[0]: writes, EDGE_TYPES[1]: writes.flip(0), EDGE_TYPES[2]: cites}
    return x_dict, edge_index_dict


def train(model, graphs, epochs=3):
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    for ep in range(epochs):
        total = 0.0
        for x_dict, ei_dict, y in graphs:
            loss = F.mse_loss(model(x_dict, ei_dict).view(-1), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
        print(f"epoch {ep} loss {total / len(graphs):.4f}")


def main():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    graphs = [(*make_data(), torch.randn(1)) for _ in range(4)]
    model = HGT({"author": 5, "paper": 5})
    train(model, graphs)
    model.eval()
    x_dict, ei_dict, _ = graphs[0]
    attributions = CaptumEdgeExplainer(model).attribute(x_dict, ei_dict)
    for et, a in attributions.items():
        print(et, "top edge", int(a.abs().argmax()), "score", round(float(a.abs().max()), 5))


if __name__ == "__main__":
    main()
