# expect: clean
# shape: the twin of edge_data_popped_by_key_crash.py that computes the attention from the transformed features: the regulariser has a graph
import torch
from torch import nn


class Graph:
    def __init__(self, src, dst, n):
        self.src, self.dst, self.n = src, dst, n
        self.ndata, self.edata = {}, {}


def edge_attention(g):
    h_src, h_dst = g.ndata["h"][g.src], g.ndata["h"][g.dst]
    return {"e": (h_src * torch.tanh(h_dst)).sum(-1)}


class AttnConv(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, g, feat):
        g.ndata["h"] = self.lin(feat)
        g.edata.update(edge_attention(g))
        att = torch.softmax(g.edata.pop("e"), dim=0)
        out = torch.zeros(g.n, feat.shape[1]).index_add(0, g.dst, att[:, None] * self.lin(feat)[g.src])
        return out, att


torch.manual_seed(0)
g = Graph(torch.tensor([0, 1, 2, 3]), torch.tensor([1, 2, 3, 0]), 4)
conv = AttnConv(5)
out, att = conv(g, torch.randn(4, 5))
reg = att.norm()
reg.backward()
