# expect: freed_graph
# source: https://github.com/dmlc/dgl/issues/4285
"""Node regression with a Graph Transformer that uses edge features
(GraphTransformerLayer with edge channels, Dwivedi & Bresson style).

A tiny DGL-like graph container holds node/edge features and Laplacian
positional encodings; the network embeds node features, edge features and the
Laplacian PE, runs multi-head edge-aware attention layers and regresses a
per-node target. Synthetic random graph; CPU only.
"""
import random
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Graph:
    """Minimal stand-in for a DGLGraph: edge list plus ndata/edata dicts."""

    def __init__(self, src, dst, num_nodes):
        self.src, self.dst, self.num_nodes = src, dst, num_nodes
        self.ndata, self.edata = {}, {}

    def num_edges(self):
        return self.src.numel()


def laplacian_positional_encoding(g, pos_enc_dim):
    A = np.zeros((g.num_nodes, g.num_nodes))
    A[g.src.numpy(), g.dst.numpy()] = 1.0
    deg = np.clip(A.sum(1), 1, None) ** -0.5
    L = np.eye(g.num_nodes) - deg[:, None] * A * deg[None, :]
    eig_val, eig_vec = np.linalg.eigh(L)
    idx = eig_val.argsort()
    eig_vec = eig_vec[:, idx]
    g.ndata["lap_pos_enc"] = torch.from_numpy(eig_vec[:, 1:pos_enc_dim + 1]).float()
    return g


class MultiHeadAttentionLayer(nn.Module):
    def __init__(self, in_dim, out_dim, num_heads):
        super().__init__()
        self.out_dim, self.num_heads = out_dim, num_heads
        self.Q = nn.Linear(in_dim, out_dim * num_heads)
        self.K = nn.Linear(in_dim, out_dim * num_heads)
        self.V = nn.Linear(in_dim, out_dim * num_heads)
        self.proj_e = nn.Linear(in_dim, out_dim * num_heads)

    def propagate_attention(self, g, Q_h, K_h, V_h, proj_e):
        score = K_h[g.src] * Q_h[g.dst] / np.sqrt(self.out_dim)
        score = score * proj_e
        e_out = score
        score = torch.exp(score.sum(-1, keepdim=True).clamp(-5, 5))
        wV = torch.zeros_like(V_h).index_add(0, g.dst, V_h[g.src] * score)
        z = torch.zeros(g.num_nodes, self.num_heads, 1).index_add(0, g.dst, score)
        return wV / (z + 1e-6), e_out

    def forward(self, g, h, e):
        H, D = self.num_heads, self.out_dim
        Q_h = self.Q(h).view(-1, H, D)
        K_h = self.K(h).view(-1, H, D)
        V_h = self.V(h).view(-1, H, D)
        proj_e = self.proj_e(e).view(-1, H, D)
        return self.propagate_attention(g, Q_h, K_h, V_h, proj_e)


class GraphTransformerLayer(nn.Module):
    def __init__(self, in_dim, out_dim, num_heads, dropout=0.0, residual=True):
        super().__init__()
        self.residual, self.dropout = residual, dropout
        self.attention = MultiHeadAttentionLayer(in_dim, out_dim // num_heads, num_heads)
        self.O_h, self.O_e = nn.Linear(out_dim, out_dim), nn.Linear(out_dim, out_dim)
        self.layer_norm1_h, self.layer_norm1_e = nn.LayerNorm(out_dim), nn.LayerNorm(out_dim)
        self.FFN_h_layer1, self.FFN_h_layer2 = nn.Linear(out_dim, out_dim * 2), nn.Linear(out_dim * 2, out_dim)
        self.FFN_e_layer1, self.FFN_e_layer2 = nn.Linear(out_dim, out_dim * 2), nn.Linear(out_dim * 2, out_dim)
        self.layer_norm2_h, self.layer_norm2_e = nn.LayerNorm(out_dim), nn.LayerNorm(out_dim)

    def forward(self, g, h, e):
        h_in1, e_in1 = h, e
        h_attn_out, e_attn_out = self.attention(g, h, e)
        h = F.dropout(h_attn_out.reshape(h.shape[0], -1), self.dropout, training=self.training)
        e = F.dropout(e_attn_out.reshape(e.shape[0], -1), self.dropout, training=self.training)
        h, e = self.O_h(h), self.O_e(e)
        if self.residual:
            h, e = h_in1 + h, e_in1 + e
        h, e = self.layer_norm1_h(h), self.layer_norm1_e(e)
        h_in2, e_in2 = h, e
        h = self.FFN_h_layer2(F.relu(self.FFN_h_layer1(h)))
        e = self.FFN_e_layer2(F.relu(self.FFN_e_layer1(e)))
        if self.residual:
            h, e = h_in2 + h, e_in2 + e
        return self.layer_norm2_h(h), self.layer_norm2_e(e)


class GraphTransformerNet(nn.Module):
    def __init__(self, net_params):
        super().__init__()
        p = net_params
        self.embedding_h = nn.Linear(p.in_dim, p.hidden_dim)
        self.embedding_e = nn.Linear(p.in_dim_edge, p.hidden_dim)
        self.embedding_lap_pos_enc = nn.Linear(p.pos_enc_dim, p.hidden_dim)
        self.in_feat_dropout = nn.Dropout(p.in_feat_dropout)
        self.layers = nn.ModuleList([GraphTransformerLayer(p.hidden_dim, p.hidden_dim, p.n_heads, p.dropout)
                                     for _ in range(p.L)])
        self.MLP_layer = nn.Sequential(nn.Linear(p.hidden_dim, p.hidden_dim // 2), nn.ReLU(),
                                       nn.Linear(p.hidden_dim // 2, p.out_dim))

    def forward(self, g, h, e, h_lap_pos_enc):
        h = h + self.embedding_lap_pos_enc(h_lap_pos_enc.float())
        h = self.in_feat_dropout(h)
        for conv in self.layers:
            h, e = conv(g, h, e)
        g.ndata["h"] = h
        return self.MLP_layer(h)


def encode_inputs(model, g):
    """Project raw node / edge features into the hidden space."""
    h = model.embedding_h(g.ndata["feat"])
    e = model.embedding_e(g.edata["feat"])
    return h, e


def build_graph(num_nodes=12, p=0.3, node_dim=8, edge_dim=4, pos_enc_dim=3):
    adj = (torch.rand(num_nodes, num_nodes) < p).float().triu(1)
    adj = adj + adj.t()
    for i in range(num_nodes):  # ring edges keep the graph connected
        adj[i, (i + 1) % num_nodes] = adj[(i + 1) % num_nodes, i] = 1.0
    src, dst = adj.nonzero(as_tuple=True)
    g = Graph(src, dst, num_nodes)
    g.ndata["feat"] = torch.randn(num_nodes, node_dim)
    g.edata["feat"] = torch.randn(g.num_edges(), edge_dim)
    return laplacian_positional_encoding(g, pos_enc_dim)


def evaluate(model, g, node_label):
    model.eval()
    with torch.no_grad():
        h, e = encode_inputs(model, g)
        out = model(g, h, e, g.ndata["lap_pos_enc"])
    model.train()
    return F.mse_loss(out, node_label).item()


def main():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    net_params = SimpleNamespace(in_dim=8, in_dim_edge=4, hidden_dim=32, out_dim=1, n_heads=4, L=2,
                                 pos_enc_dim=3, dropout=0.0, in_feat_dropout=0.0)
    g_dgl = build_graph(node_dim=net_params.in_dim, edge_dim=net_params.in_dim_edge,
                        pos_enc_dim=net_params.pos_enc_dim)
    node_label = torch.randn(g_dgl.num_nodes, 1)

    model = GraphTransformerNet(net_params)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=2)
    criteria = nn.MSELoss()

    h, e = encode_inputs(model, g_dgl)
    for n in range(3):
        lp_pe = g_dgl.ndata["lap_pos_enc"]
        sign_flip = torch.where(torch.rand(lp_pe.size(1)) >= 0.5, 1.0, -1.0)
        out = model(g_dgl, h, e, lp_pe * sign_flip[None, :])
        loss = criteria(out, node_label)
        print(f"epoch #{n}, loss:{loss.item():.4f}")
        optimizer.zero_grad()
        loss.backward()  # raises
        optimizer.step()
        scheduler.step(loss.item())
    print("eval mse", round(evaluate(model, g_dgl, node_label), 4))


if __name__ == "__main__":
    main()
