# expect: inplace_version
# source: https://github.com/idiap/fast-transformers/pull/10
"""Character-level autoregressive transformer trained in recurrent mode.

A small port of the fast_transformers "recurrent" API: causal linear attention
is run one time step at a time with a fixed-size memory (S_i, Z_i) per layer,
the way the library is used for streaming / chained models.  A char LM on a
synthetic periodic corpus is trained step by step with teacher forcing and
evaluated with the same recurrent encoder.
"""
import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class ModelConfig:
    vocab_size: int = 24
    d_model: int = 32
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int = 64
    dropout: float = 0.1
    eps: float = 1e-6


@dataclass
class TrainConfig:
    seq_len: int = 12
    batch_size: int = 8
    steps: int = 3
    lr: float = 3e-3
    warmup: int = 2
    clip: float = 1.0
    seed: int = 0
    model: ModelConfig = field(default_factory=ModelConfig)


def elu_feature_map(x):
    return F.elu(x) + 1


def check_state(state=None, memory=None):
    """Backwards compatible handling of the old `memory` keyword."""
    if memory is not None:
        return memory
    return state


class RecurrentLinearAttention(nn.Module):
    """Causal linear attention as a fixed-dimensional state recurrent model."""

    def __init__(self, query_dimensions, feature_map=None, eps=1e-6):
        super().__init__()
        self.feature_map = feature_map or elu_feature_map
        self.eps = eps

    def forward(self, query, key, value, state=None, memory=None):
        state = check_state(state, memory)

        Q = self.feature_map(query)
        K = self.feature_map(key)

        N, H, D = Q.shape
        _, _, M = value.shape

        if state is None:
            Si = query.new_zeros((N, H, D, M))
            Zi = query.new_zeros((N, H, D))
        else:
            Si, Zi = state

        if len(Si) != N:
            raise ValueError("The batch size changed during iteration")

        # Update the internal state
        Zi += K
        Si += torch.einsum("nhd,nhm->nhdm", K, value)

        # Compute the output
        Z = 1. / (torch.einsum("nhd,nhd->nh", Q, Zi) + self.eps)
        V = torch.einsum("nhd,nhdm,nh->nhm", Q, Si, Z)

        return V, [Si, Zi]


class RecurrentAttentionLayer(nn.Module):
    def __init__(self, attention, d_model, n_heads):
        super().__init__()
        d_keys = d_model // n_heads
        self.inner_attention = attention
        self.query_projection = nn.Linear(d_model, d_keys * n_heads)
        self.key_projection = nn.Linear(d_model, d_keys * n_heads)
        self.value_projection = nn.Linear(d_model, d_keys * n_heads)
        self.out_projection = nn.Linear(d_keys * n_heads, d_model)
        self.n_heads = n_heads

    def forward(self, query, key, value, state=None, memory=None):
        state = check_state(state, memory)
        query = self.query_projection(query)
        key = self.key_projection(key)
        value = self.value_projection(value)

        N, D = query.shape
        H = self.n_heads
        new_value, state = self.inner_attention(
            query.view(N, H, -1), key.view(N, H, -1), value.view(N, H, -1), state
        )
        new_value = new_value.view(N, -1)
        return self.out_projection(new_value), state


class RecurrentTransformerEncoderLayer(nn.Module):
    def __init__(self, attention, d_model, d_ff, dropout):
        super().__init__()
        self.attention = attention
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, state=None):
        x2, state = self.attention(x, x, x, state)
        x = self.norm1(x + self.dropout(x2))
        y = self.dropout(F.gelu(self.linear1(x)))
        y = self.dropout(self.linear2(y))
        return self.norm2(x + y), state


class RecurrentTransformerEncoder(nn.Module):
    def __init__(self, layers, norm_layer=None):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.norm = norm_layer

    def forward(self, x, state=None):
        if state is None:
            state = [None] * len(self.layers)
        for i, layer in enumerate(self.layers):
            x, s = layer(x, state[i])
            state[i] = s
        if self.norm is not None:
            x = self.norm(x)
        return x, state


def build_recurrent_encoder(cfg: ModelConfig):
    layers = []
    for _ in range(cfg.n_layers):
        attn = RecurrentLinearAttention(cfg.d_model // cfg.n_heads, eps=cfg.eps)
        layers.append(RecurrentTransformerEncoderLayer(
            RecurrentAttentionLayer(attn, cfg.d_model, cfg.n_heads),
            cfg.d_model, cfg.d_ff, cfg.dropout))
    return RecurrentTransformerEncoder(layers, nn.LayerNorm(cfg.d_model))


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=512):
        super().__init__()
        pe = torch.zeros(max_len, d_model)
        pos = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)
        self.register_buffer("pe", pe)

    def forward(self, x, i):
        return x + self.pe[i]


class RecurrentCharLM(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.embedding = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = PositionalEncoding(cfg.d_model)
        self.encoder = build_recurrent_encoder(cfg)
        self.predictor = nn.Linear(cfg.d_model, cfg.vocab_size)

    def step(self, tokens, i, state=None):
        x = self.pos(self.embedding(tokens), i)
        y, state = self.encoder(x, state)
        return self.predictor(y), state


def make_corpus(cfg: TrainConfig, n_batches):
    g = torch.Generator().manual_seed(cfg.seed)
    period = torch.randint(3, 7, (n_batches, cfg.batch_size, 1), generator=g)
    offset = torch.randint(0, cfg.model.vocab_size, (n_batches, cfg.batch_size, 1), generator=g)
    t = torch.arange(cfg.seq_len + 1).view(1, 1, -1)
    return (offset + t % period) % cfg.model.vocab_size


class LossHistory:
    def __init__(self):
        self.train, self.valid = [], []

    def on_step_end(self, step, loss):
        self.train.append(loss)
        print(f"step {step:3d} | train loss {loss:.4f}")

    def on_eval_end(self, loss):
        self.valid.append(loss)
        print(f"           | valid loss {loss:.4f}")


class Trainer:
    def __init__(self, model, cfg: TrainConfig, callbacks=()):
        self.model = model
        self.cfg = cfg
        self.callbacks = list(callbacks)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / cfg.warmup))
        self.global_step = 0

    def _sequence_loss(self, batch):
        state = None
        losses = []
        for i in range(batch.shape[1] - 1):
            logits, state = self.model.step(batch[:, i], i, state)
            losses.append(F.cross_entropy(logits, batch[:, i + 1]))
        return torch.stack(losses).mean()

    def train_step(self, batch):
        self.model.train()
        self.optimizer.zero_grad()
        loss = self._sequence_loss(batch)
        loss.backward()  # raises
        nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip)
        self.optimizer.step()
        self.scheduler.step()
        self.global_step += 1
        return loss.item()

    @torch.no_grad()
    def evaluate(self, batches):
        self.model.eval()
        total = 0.0
        for batch in batches:
            total += self._sequence_loss(batch).item()
        return total / len(batches)

    def fit(self, train_batches, valid_batches):
        for batch in train_batches:
            loss = self.train_step(batch)
            for cb in self.callbacks:
                cb.on_step_end(self.global_step, loss)
        valid = self.evaluate(valid_batches)
        for cb in self.callbacks:
            cb.on_eval_end(valid)
        return valid


def main():
    cfg = TrainConfig()
    torch.manual_seed(cfg.seed)
    model = RecurrentCharLM(cfg.model)
    data = make_corpus(cfg, cfg.steps + 2)
    trainer = Trainer(model, cfg, callbacks=[LossHistory()])
    trainer.fit(list(data[:cfg.steps]), list(data[cfg.steps:]))


if __name__ == "__main__":
    main()
