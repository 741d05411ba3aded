# expect: clean
# source: https://github.com/pyg-team/pytorch_geometric/issues/4259
"""Graph-to-sequence generator: a GAT encodes a knowledge graph and a
Transformer-style decoder (BART-like blocks) cross-attends to the node states
while teacher-forcing the target token sequence.

Synthetic seeded graph and token batches; two optimizers (GAT and decoder),
warmup scheduler, gradient clipping, validation per epoch.
"""
import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GraphConfig:
    num_nodes: int = 24
    node_feats: int = 16
    heads: int = 2
    hidden: int = 16


@dataclass
class DecoderConfig:
    vocab: int = 40
    d_model: int = 32
    n_layers: int = 3
    n_heads: int = 4
    max_len: int = 12


@dataclass
class TrainConfig:
    graph: GraphConfig = field(default_factory=GraphConfig)
    decoder: DecoderConfig = field(default_factory=DecoderConfig)
    batches_per_epoch: int = 4
    batch_size: int = 6
    epochs: int = 2
    lr_gnn: float = 5e-3
    lr_dec: float = 1e-3
    warmup: int = 3
    clip: float = 1.0
    seed: int = 0


class GATConv(nn.Module):
    """Dense single-graph GAT layer (adjacency mask instead of edge_index)."""

    def __init__(self, in_ch, out_ch, heads=1, concat=True, dropout=0.0):
        super().__init__()
        self.heads, self.out_ch, self.concat = heads, out_ch, concat
        self.lin = nn.Linear(in_ch, heads * out_ch, bias=False)
        self.att_src = nn.Parameter(torch.randn(heads, out_ch) * 0.1)
        self.att_dst = nn.Parameter(torch.randn(heads, out_ch) * 0.1)
        self.dropout = dropout

    def forward(self, x, adj):
        n = x.size(0)
        h = self.lin(x).view(n, self.heads, self.out_ch)
        a_src = (h * self.att_src).sum(-1)
        a_dst = (h * self.att_dst).sum(-1)
        e = F.leaky_relu(a_dst.unsqueeze(1) + a_src.unsqueeze(0), 0.2)
        e = e.masked_fill(~adj.unsqueeze(-1), float("-inf"))
        alpha = F.dropout(torch.softmax(e, dim=1), self.dropout, self.training)
        out = torch.einsum("ijh,jhc->ihc", alpha, h)
        return out.reshape(n, -1) if self.concat else out.mean(1)


class GAT(nn.Module):
    def __init__(self, cfg: GraphConfig, out_dim):
        super().__init__()
        self.conv1 = GATConv(cfg.node_feats, cfg.hidden, heads=cfg.heads, dropout=0.1)
        self.conv2 = GATConv(cfg.heads * cfg.hidden, out_dim, heads=1, concat=False)

    def forward(self, x, adj):
        x = F.dropout(x, p=0.2, training=self.training)
        x = F.elu(self.conv1(x, adj))
        x = F.dropout(x, p=0.2, training=self.training)
        return self.conv2(x, adj)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(cfg.d_model, cfg.n_heads, batch_first=True)
        self.graph_attn = nn.MultiheadAttention(cfg.d_model, cfg.n_heads, batch_first=True)
        self.ffn = nn.Sequential(nn.Linear(cfg.d_model, 2 * cfg.d_model), nn.GELU(),
                                 nn.Linear(2 * cfg.d_model, cfg.d_model))
        self.norms = nn.ModuleList([nn.LayerNorm(cfg.d_model) for _ in range(3)])

    def forward(self, x, memory, causal_mask):
        h, _ = self.self_attn(x, x, x, attn_mask=causal_mask)
        x = self.norms[0](x + h)
        h, _ = self.graph_attn(x, memory, memory)
        x = self.norms[1](x + h)
        return self.norms[2](x + self.ffn(x))


class Graph2Seq(nn.Module):
    def __init__(self, cfg: TrainConfig, node_x, adj):
        super().__init__()
        d = cfg.decoder
        self.gat = GAT(cfg.graph, d.d_model)
        self.embed = nn.Embedding(d.vocab, d.d_model)
        self.pos = nn.Parameter(torch.randn(d.max_len, d.d_model) * 0.02)
        self.layers = nn.ModuleList([DecoderLayer(d) for _ in range(d.n_layers)])
        self.lm_head = nn.Linear(d.d_model, d.vocab)
        self.register_buffer("node_x", node_x)
        self.register_buffer("adj", adj)
        self._graph_memory = None

    @property
    def graph_memory(self):
        # node states of the (single, static) knowledge graph
        if self._graph_memory is None:
            self._graph_memory = self.gat(self.node_x, self.adj)
        return self._graph_memory

    def invalidate(self):
        self._graph_memory = None

    def forward(self, tokens):
        b, t = tokens.shape
        memory = self.graph_memory.unsqueeze(0).expand(b, -1, -1)
        x = self.embed(tokens) + self.pos[:t]
        mask = torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
        for layer in self.layers:
            x = layer(x, memory, mask)
        return self.lm_head(x)


def make_graph(cfg: GraphConfig, gen):
    x = torch.randn(cfg.num_nodes, cfg.node_feats, generator=gen)
    adj = torch.rand(cfg.num_nodes, cfg.num_nodes, generator=gen) < 0.2
    adj = adj | adj.t() | torch.eye(cfg.num_nodes, dtype=torch.bool)
    return x, adj


def batches(cfg: TrainConfig, gen):
    for _ in range(cfg.batches_per_epoch):
        yield torch.randint(1, cfg.decoder.vocab, (cfg.batch_size, cfg.decoder.max_len), generator=gen)


def warmup_lambda(warmup):
    return lambda step: min(1.0, (step + 1) / warmup)


class Trainer:
    def __init__(self, model, cfg: TrainConfig):
        self.model, self.cfg = model, cfg
        gnn_params = list(model.gat.parameters())
        gnn_ids = {id(p) for p in gnn_params}
        dec_params = [p for p in model.parameters() if id(p) not in gnn_ids]
        self.opt_gnn = torch.optim.Adam(gnn_params, lr=cfg.lr_gnn)
        self.opt_dec = torch.optim.AdamW(dec_params, lr=cfg.lr_dec, weight_decay=0.01)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt_dec, warmup_lambda(cfg.warmup))
        self.step = 0

    def loss_fn(self, tokens):
        logits = self.model(tokens[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), tokens[:, 1:].reshape(-1))

    def train_step(self, tokens):
        self.opt_gnn.zero_grad()
        self.opt_dec.zero_grad()
        self.model.invalidate()
        loss = self.loss_fn(tokens)
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip)
        self.opt_gnn.step()
        self.opt_dec.step()
        self.sched.step()
        self.step += 1
        return loss.item()

    @torch.no_grad()
    def evaluate(self, gen):
        self.model.eval()
        self.model.invalidate()
        losses = [self.loss_fn(tok).item() for tok in batches(self.cfg, gen)]
        self.model.invalidate()
        self.model.train()
        return sum(losses) / len(losses)

    def fit(self):
        gen = torch.Generator().manual_seed(self.cfg.seed + 1)
        for epoch in range(self.cfg.epochs):
            self.model.invalidate()
            losses = [self.train_step(tok) for tok in batches(self.cfg, gen)]
            val = self.evaluate(torch.Generator().manual_seed(123))
            print(f"epoch {epoch} train {sum(losses) / len(losses):.3f} val {val:.3f} ppl {math.exp(val):.1f}")


def main():
    cfg = TrainConfig()
    torch.manual_seed(cfg.seed)
    node_x, adj = make_graph(cfg.graph, torch.Generator().manual_seed(cfg.seed))
    model = Graph2Seq(cfg, node_x, adj)
    Trainer(model, cfg).fit()


if __name__ == "__main__":
    main()
