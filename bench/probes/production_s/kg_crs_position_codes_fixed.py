# expect: clean
# source: https://github.com/lisk123/UCCR/issues/6
"""Knowledge-graph enhanced conversational recommender in the style of CRSLab (KGSF / UCCR).

Entities of a DBpedia-like knowledge graph are encoded with a relational GCN
(basis-decomposed relation weights), the entities mentioned in the dialogue
context are pooled with self-attention into a user representation, and items
are scored against it.  The conversation module is a Transformer decoder that
attends over context tokens and KG entities; its position embeddings are either
learned or fixed sinusoidal codes depending on the config.  A small system class
trains the recommendation stage and evaluates Recall@k on synthetic dialogues.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def create_position_codes(n_pos, dim, out):
    position_enc = np.array([
        [pos / np.power(10000, 2 * j / dim) for j in range(dim // 2)]
        for pos in range(n_pos)
    ])
    out.detach_()
    out.requires_grad = False
    out[:, 0::2] = torch.FloatTensor(np.sin(position_enc)).type_as(out)
    out[:, 1::2] = torch.FloatTensor(np.cos(position_enc)).type_as(out)


def _create_selfattn_mask(x):
    bsz, time = x.size(0), x.size(1)
    return torch.tril(x.new_ones(time, time)).unsqueeze(0).expand(bsz, -1, -1)


class RGCNLayer(nn.Module):
    def __init__(self, in_dim, out_dim, num_relations, num_bases):
        super().__init__()
        self.basis = nn.Parameter(torch.empty(num_bases, in_dim, out_dim))
        self.comp = nn.Parameter(torch.empty(num_relations, num_bases))
        self.root = nn.Linear(in_dim, out_dim)
        nn.init.xavier_uniform_(self.basis)
        nn.init.xavier_uniform_(self.comp)

    def forward(self, x, edge_index, edge_type):
        weight = torch.einsum("rb,bio->rio", self.comp, self.basis)
        src, dst = edge_index
        msg = torch.bmm(x[src].unsqueeze(1), weight[edge_type]).squeeze(1)
        deg = torch.zeros(x.size(0)).index_add_(0, dst, torch.ones_like(dst, dtype=torch.float)).clamp(min=1)
        agg = torch.zeros(x.size(0), msg.size(1)).index_add_(0, dst, msg) / deg.unsqueeze(-1)
        return agg + self.root(x)


class SelfAttentionBatch(nn.Module):
    def __init__(self, dim, da):
        super().__init__()
        self.a = nn.Parameter(torch.empty(dim, da))
        self.b = nn.Parameter(torch.empty(da, 1))
        nn.init.xavier_uniform_(self.a)
        nn.init.xavier_uniform_(self.b)

    def forward(self, h):
        e = torch.matmul(torch.tanh(torch.matmul(h, self.a)), self.b).squeeze(-1)
        return torch.matmul(F.softmax(e, dim=0), h)


class TransformerDecoderLayerKG(nn.Module):
    def __init__(self, n_heads, dim, ffn_size, dropout=0.0):
        super().__init__()
        self.self_attention = nn.MultiheadAttention(dim, n_heads, batch_first=True)
        self.kg_attention = nn.MultiheadAttention(dim, n_heads, batch_first=True)
        self.ffn = nn.Sequential(nn.Linear(dim, ffn_size), nn.ReLU(), nn.Linear(ffn_size, dim))
        self.norms = nn.ModuleList([nn.LayerNorm(dim) for _ in range(3)])
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, kg_output):
        causal = ~_create_selfattn_mask(x)[0].bool()
        x = self.norms[0](x + self.dropout(self.self_attention(x, x, x, attn_mask=causal)[0]))
        x = self.norms[1](x + self.dropout(self.kg_attention(x, kg_output, kg_output)[0]))
        return self.norms[2](x + self.dropout(self.ffn(x)))


class TransformerDecoderKG(nn.Module):
    def __init__(self, n_heads, n_layers, embedding_size, ffn_size, embedding, dropout=0.0,
                 learn_positional_embeddings=False, n_positions=64):
        super().__init__()
        self.dim = embedding_size
        self.embeddings = embedding
        self.position_embeddings = nn.Embedding(n_positions, embedding_size)
        if not learn_positional_embeddings:
            create_position_codes(n_positions, embedding_size, out=self.position_embeddings.weight)
        else:
            nn.init.normal_(self.position_embeddings.weight, 0, embedding_size ** -0.5)
        self.layers = nn.ModuleList(
            [TransformerDecoderLayerKG(n_heads, embedding_size, ffn_size, dropout) for _ in range(n_layers)])

    def forward(self, input, kg_output):
        positions = torch.arange(input.size(1)).unsqueeze(0)
        tensor = self.embeddings(input) * math.sqrt(self.dim)
        tensor = tensor + self.position_embeddings(positions).expand_as(tensor)
        for layer in self.layers:
            tensor = layer(tensor, kg_output)
        return tensor


class UCCRModel(nn.Module):
    def __init__(self, opt, vocab, kg):
        super().__init__()
        self.n_entity, self.dim = kg["n_entity"], opt["kg_emb_dim"]
        self.edge_index, self.edge_type = kg["edge_index"], kg["edge_type"]
        self._build_kg_layer(opt, kg)
        self._build_recommendation_layer()
        self._build_conversation_layer(opt, vocab)

    def _build_kg_layer(self, opt, kg):
        self.entity_embedding = nn.Embedding(self.n_entity, self.dim)
        self.kg_encoder = RGCNLayer(self.dim, self.dim, kg["n_relation"], opt["num_bases"])
        self.kg_attn = SelfAttentionBatch(self.dim, self.dim)

    def _build_recommendation_layer(self):
        self.rec_bias = nn.Linear(self.dim, self.n_entity)
        self.rec_loss = nn.CrossEntropyLoss()

    def _build_conversation_layer(self, opt, vocab):
        self.token_embedding = nn.Embedding(vocab["vocab_size"], opt["token_emb_dim"], padding_idx=vocab["pad"])
        self.kg_to_token = nn.Linear(self.dim, opt["token_emb_dim"])
        self.conv_decoder = TransformerDecoderKG(
            opt["n_heads"], opt["n_layers"], opt["token_emb_dim"], opt["ffn_size"], self.token_embedding,
            dropout=opt["dropout"], learn_positional_embeddings=opt["learn_positional_embeddings"],
            n_positions=opt["n_positions"])
        self.conv_out = nn.Linear(opt["token_emb_dim"], vocab["vocab_size"])

    def encode_kg(self):
        return self.kg_encoder(self.entity_embedding.weight, self.edge_index, self.edge_type)

    def recommend(self, batch):
        entity_graph_reps = self.encode_kg()
        user_reps = torch.stack([self.kg_attn(entity_graph_reps[ids]) if len(ids) else
                                 torch.zeros(self.dim) for ids in batch["context_entities"]])
        scores = F.linear(user_reps, entity_graph_reps, self.rec_bias.bias)
        return self.rec_loss(scores, batch["item"]), scores

    def converse(self, batch):
        entity_graph_reps = self.kg_to_token(self.encode_kg()).unsqueeze(0).expand(batch["response"].size(0), -1, -1)
        hidden = self.conv_decoder(batch["response"][:, :-1], entity_graph_reps)
        logits = self.conv_out(hidden)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), batch["response"][:, 1:].reshape(-1))


class UCCRSystem:
    def __init__(self, opt, vocab, kg, train_data, valid_data):
        self.opt, self.train_data, self.valid_data = opt, train_data, valid_data
        self.model = UCCRModel(opt, vocab, kg)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=opt["rec"]["lr"])
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=1, gamma=0.5)

    def train_step(self, batch, stage):
        self.model.train()
        loss = self.model.recommend(batch)[0] if stage == "rec" else self.model.converse(batch)
        self.optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), self.opt["gradient_clip"])
        self.optimizer.step()
        return loss.item()

    @torch.no_grad()
    def evaluate(self, k=5):
        self.model.eval()
        hits = total = 0
        for batch in self.valid_data:
            _, scores = self.model.recommend(batch)
            topk = scores.topk(k, dim=-1).indices
            hits += (topk == batch["item"].unsqueeze(-1)).any(-1).sum().item()
            total += batch["item"].numel()
        return {"recall@%d" % k: hits / total}

    def fit(self):
        for epoch in range(self.opt["rec"]["epoch"]):
            losses = [self.train_step(b, "rec") for b in self.train_data]
            self.scheduler.step()
            print("rec epoch %d loss %.4f %s" % (epoch, sum(losses) / len(losses), self.evaluate()))
        for epoch in range(self.opt["conv"]["epoch"]):
            losses = [self.train_step(b, "conv") for b in self.train_data]
            print("conv epoch %d loss %.4f" % (epoch, sum(losses) / len(losses)))


def synthetic_crs_data(n_entity=40, n_relation=4, vocab_size=60, n_batches=3, bs=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    n_edges = 160
    kg = {"n_entity": n_entity, "n_relation": n_relation,
          "edge_index": torch.randint(0, n_entity, (2, n_edges), generator=g),
          "edge_type": torch.randint(0, n_relation, (n_edges,), generator=g)}
    batches = []
    for _ in range(n_batches):
        batches.append({
            "context_entities": [torch.randint(0, n_entity, (int(torch.randint(1, 5, (1,), generator=g)),),
                                               generator=g) for _ in range(bs)],
            "item": torch.randint(0, n_entity, (bs,), generator=g),
            "response": torch.randint(1, vocab_size, (bs, 10), generator=g)})
    return kg, {"vocab_size": vocab_size, "pad": 0}, batches


opt = {
    "kg_emb_dim": 32, "num_bases": 4, "token_emb_dim": 32, "n_heads": 2, "n_layers": 1, "ffn_size": 64,
    "dropout": 0.1, "learn_positional_embeddings": False, "n_positions": 32, "gradient_clip": 0.1,
    "rec": {"epoch": 2, "lr": 1e-3}, "conv": {"epoch": 1, "lr": 1e-3},
}


def main():
    torch.manual_seed(42)
    kg, vocab, batches = synthetic_crs_data()
    system = UCCRSystem(opt, vocab, kg, batches[:2], batches[2:])
    system.fit()


if __name__ == "__main__":
    main()
