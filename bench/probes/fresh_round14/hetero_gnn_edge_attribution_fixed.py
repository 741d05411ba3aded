# expect: clean
# source: https://github.com/meta-pytorch/captum/issues/1116
"""Edge attribution for a heterogeneous GNN (MUTAG-like schema graph) with
Integrated Gradients: the model takes per-edge-type edge weights, an IG
explainer interpolates them from a zero baseline and integrates gradients of
the target-node prediction w.r.t. every edge-type weight tensor."""
from dataclasses import dataclass

import torch
import torch.nn as nn

CanonicalEType = tuple  # (src_type, etype, dst_type)


@dataclass
class GraphSpec:
    num_nodes: dict
    canonical_etypes: tuple
    num_edges: int = 24
    feat_dim: int = 10
    target_ntype: str = "SCHEMA"


class HeteroGraph:
    def __init__(self, spec: GraphSpec, g: torch.Generator):
        self.spec = spec
        self.ntypes = list(spec.num_nodes)
        self.canonical_etypes = list(spec.canonical_etypes)
        self.edges = {}
        for (src, et, dst) in self.canonical_etypes:
            s = torch.randint(0, spec.num_nodes[src], (spec.num_edges,), generator=g)
            d = torch.randint(0, spec.num_nodes[dst], (spec.num_edges,), generator=g)
            self.edges[(src, et, dst)] = (s, d)
        self.ndata = {nt: torch.randn(n, spec.feat_dim, generator=g) for nt, n in spec.num_nodes.items()}

    def num_dst(self, c_etype):
        return self.spec.num_nodes[c_etype[2]]


class EdgeWeightNorm(nn.Module):
    """right-normalise edge weights by the weighted in-degree of the destination"""

    def forward(self, graph, c_etype, eweight):
        _, d = graph.edges[c_etype]
        deg = torch.zeros(graph.num_dst(c_etype)).index_add(0, d, eweight)
        return eweight / deg.clamp_min(1e-6)[d]


class WeightedSAGEConv(nn.Module):
    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.fc_self = nn.Linear(in_dim, out_dim)
        self.fc_neigh = nn.Linear(in_dim, out_dim, bias=False)

    def forward(self, graph, c_etype, h_src, h_dst, edge_weight):
        s, d = graph.edges[c_etype]
        msg = h_src[s] * edge_weight.unsqueeze(-1)
        agg = torch.zeros(h_dst.shape[0], h_src.shape[1]).index_add(0, d, msg)
        return self.fc_self(h_dst) + self.fc_neigh(agg)


class HeteroGraphConv(nn.Module):
    def __init__(self, mods: dict):
        super().__init__()
        self.mods = nn.ModuleDict({et: m for et, m in mods.items()})

    def forward(self, graph, h_dict, mod_kwargs):
        out = {}
        for c_etype in graph.canonical_etypes:
            src, et, dst = c_etype
            r = self.mods[et](graph, c_etype, h_dict[src], h_dict[dst], **mod_kwargs[c_etype])
            out[dst] = out.get(dst, 0) + r
        return out


class Model(nn.Module):
    def __init__(self, etypes, dim=10):
        super().__init__()
        self.conv1 = HeteroGraphConv({et: WeightedSAGEConv(dim, dim) for _, et, _ in etypes})
        self.w = EdgeWeightNorm()
        self.l = nn.Linear(dim, 1)

    def forward(self, graph, h_dict, eweight):
        h = self.conv1(graph, h_dict, mod_kwargs={
            c: {"edge_weight": self.w(graph, c, eweight[c])} for c in graph.canonical_etypes})
        return self.l(torch.relu(h[graph.spec.target_ntype])).squeeze(-1)


class IntegratedGradients:
    def __init__(self, forward_func, n_steps=16):
        self.forward_func = forward_func
        self.n_steps = n_steps

    def attribute(self, inputs, target_index):
        baselines = tuple(torch.zeros_like(x) for x in inputs)
        alphas = torch.linspace(1.0 / self.n_steps, 1.0, self.n_steps)
        total = [torch.zeros_like(x) for x in inputs]
        for a in alphas:
            scaled = tuple((b + a * (x - b)).requires_grad_() for x, b in zip(inputs, baselines))
            out = self.forward_func(*scaled)[target_index]
            grads = torch.autograd.grad(out, scaled, allow_unused=True)
            for t, gr in zip(total, grads):
                if gr is not None:
                    t += gr / self.n_steps
        return tuple((x - b) * t for x, b, t in zip(inputs, baselines, total))


def explain_edges(model, graph, node_idx):
    etypes = graph.canonical_etypes

    def model_forward(*edge_masks):
        eweight = dict(zip(etypes, edge_masks))
        return model(graph, graph.ndata, eweight)

    masks = tuple(torch.ones(graph.spec.num_edges) for _ in etypes)
    ig = IntegratedGradients(model_forward)
    attrs = ig.attribute(masks, target_index=node_idx)
    return {c: a for c, a in zip(etypes, attrs)}


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    spec = GraphSpec(
        num_nodes={"SCHEMA": 5, "Atom": 12, "Bond": 9},
        canonical_etypes=(("Atom", "isPartOf", "SCHEMA"), ("Bond", "hasBond", "SCHEMA"),
                          ("Atom", "inBond", "Bond"), ("Bond", "links", "Atom")))
    graph = HeteroGraph(spec, g)
    model = Model(graph.canonical_etypes)
    model.eval()
    with torch.no_grad():
        scores = model(graph, graph.ndata, {c: torch.ones(spec.num_edges) for c in graph.canonical_etypes})
    node_idx = int(scores.argmax())
    attributions = explain_edges(model, graph, node_idx)
    for c_etype, attr in attributions.items():
        top = attr.abs().topk(3)
        print(c_etype, "top edges", top.indices.tolist(), "score", round(float(attr.sum()), 4))


if __name__ == "__main__":
    main()
