# expect: nonleaf_optimizer
# source: https://github.com/galsang/BiDAF-pytorch/issues/27
"""BiDAF reading-comprehension trainer (char-CNN + GloVe word embedding,
highway network, contextual LSTM with weight-dropped recurrent weights,
attention flow, start/end pointer heads) with EMA of the weights, trained on
synthetic SQuAD-like batches."""
import argparse
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F


# ----------------------------------------------------------------- utils/nn.py
class Linear(nn.Module):
    def __init__(self, in_features, out_features, dropout=0.0):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.dropout = nn.Dropout(p=dropout) if dropout > 0 else None
        nn.init.kaiming_normal_(self.linear.weight)
        nn.init.constant_(self.linear.bias, 0)

    def forward(self, x):
        if self.dropout is not None:
            x = self.dropout(x)
        return self.linear(x)


class LSTM(nn.Module):
    """batch_first bi-LSTM with DropConnect on the hidden-to-hidden weights"""

    def __init__(self, input_size, hidden_size, weight_drop=0.2, layer_names=("weight_hh_l0",)):
        super().__init__()
        self.rnn = nn.LSTM(input_size, hidden_size, bidirectional=True, batch_first=True)
        self.weight_drop = weight_drop
        self.layer_names = layer_names
        for layer in layer_names:
            w = getattr(self.rnn, layer)
            self.register_parameter(f"{layer}_raw", nn.Parameter(w.data))
            self.rnn._parameters[layer] = F.dropout(w, p=self.weight_drop, training=self.training)

    def _setweights(self):
        for layer in self.layer_names:
            raw_w = getattr(self, f"{layer}_raw")
            setattr(self.rnn, layer, F.dropout(raw_w, p=self.weight_drop, training=self.training))

    def forward(self, x):
        self._setweights()
        return self.rnn(x)[0]


# -------------------------------------------------------------- model/model.py
class BiDAF(nn.Module):
    def __init__(self, args, pretrained):
        super().__init__()
        self.args = args
        self.char_emb = nn.Embedding(args.char_vocab_size, args.char_dim, padding_idx=1)
        nn.init.uniform_(self.char_emb.weight, -0.001, 0.001)
        self.char_conv = nn.Conv2d(1, args.char_channel_size, (args.char_dim, args.char_channel_width))
        self.word_emb = nn.Embedding.from_pretrained(pretrained, freeze=True)
        d = args.hidden_size * 2
        self.highway_linear = nn.Sequential(Linear(d, d), nn.ReLU())
        self.highway_gate = nn.Sequential(Linear(d, d), nn.Sigmoid())
        self.context_LSTM = LSTM(d, args.hidden_size)
        self.att_weight_c = Linear(d, 1)
        self.att_weight_q = Linear(d, 1)
        self.att_weight_cq = Linear(d, 1)
        self.modeling_LSTM = LSTM(d * 4, args.hidden_size)
        self.p1_weight = Linear(d * 5, 1, dropout=args.dropout)
        self.p2_weight = Linear(d * 5, 1, dropout=args.dropout)
        self.dropout = nn.Dropout(p=args.dropout)

    def char_emb_layer(self, x):
        b = x.size(0)
        x = self.dropout(self.char_emb(x))                       # (b, seq, wl, cd)
        x = x.view(-1, self.args.char_dim, x.size(2)).unsqueeze(1)
        x = self.char_conv(x).squeeze(2)
        x = F.max_pool1d(x, x.size(2)).squeeze(2)
        return x.view(b, -1, self.args.char_channel_size)

    def highway(self, x1, x2):
        x = torch.cat([x1, x2], dim=-1)
        h, g = self.highway_linear(x), self.highway_gate(x)
        return g * h + (1 - g) * x

    def att_flow(self, c, q):
        c_len, q_len = c.size(1), q.size(1)
        cq = torch.stack([self.att_weight_cq(c * q[:, i:i + 1]).squeeze(-1) for i in range(q_len)], -1)
        s = self.att_weight_c(c).expand(-1, -1, q_len) + \
            self.att_weight_q(q).permute(0, 2, 1).expand(-1, c_len, -1) + cq
        c2q = torch.bmm(F.softmax(s, dim=2), q)
        b = F.softmax(torch.max(s, dim=2)[0], dim=1).unsqueeze(1)
        q2c = torch.bmm(b, c).expand(-1, c_len, -1)
        return torch.cat([c, c2q, c * c2q, c * q2c], dim=-1)

    def forward(self, batch):
        c = self.highway(self.char_emb_layer(batch.c_char), self.word_emb(batch.c_word))
        q = self.highway(self.char_emb_layer(batch.q_char), self.word_emb(batch.q_word))
        c, q = self.context_LSTM(c), self.context_LSTM(q)
        g = self.att_flow(c, q)
        m = self.modeling_LSTM(g)
        gm = torch.cat([g, m], dim=-1)
        return self.p1_weight(gm).squeeze(-1), self.p2_weight(gm).squeeze(-1)


# ---------------------------------------------------------------- model/ema.py
class EMA:
    def __init__(self, mu):
        self.mu, self.shadow = mu, {}

    def register(self, name, val):
        self.shadow[name] = val.clone()

    def update(self, name, x):
        self.shadow[name] = (1.0 - self.mu) * x + self.mu * self.shadow[name]


# ---------------------------------------------------------------------- run.py
def synthetic_batches(args, n, g):
    for _ in range(n):
        yield SimpleNamespace(
            c_char=torch.randint(2, args.char_vocab_size, (args.batch, args.c_len, args.word_len), generator=g),
            q_char=torch.randint(2, args.char_vocab_size, (args.batch, args.q_len, args.word_len), generator=g),
            c_word=torch.randint(0, args.word_vocab_size, (args.batch, args.c_len), generator=g),
            q_word=torch.randint(0, args.word_vocab_size, (args.batch, args.q_len), generator=g),
            s_idx=torch.randint(0, args.c_len, (args.batch,), generator=g),
            e_idx=torch.randint(0, args.c_len, (args.batch,), generator=g))


def train(args, vectors):
    model = BiDAF(args, vectors)
    ema = EMA(args.exp_decay_rate)
    for name, param in model.named_parameters():
        if param.requires_grad:
            ema.register(name, param.data)
    parameters = filter(lambda p: p.requires_grad, model.parameters())
    optimizer = torch.optim.Adadelta(parameters, lr=args.learning_rate)  # raises
    criterion = nn.CrossEntropyLoss()
    model.train()
    g = torch.Generator().manual_seed(0)
    for i, batch in enumerate(synthetic_batches(args, args.iters, g)):
        p1, p2 = model(batch)
        optimizer.zero_grad()
        batch_loss = criterion(p1, batch.s_idx) + criterion(p2, batch.e_idx)
        batch_loss.backward()
        optimizer.step()
        for name, param in model.named_parameters():
            if param.requires_grad:
                ema.update(name, param.data)
        print(f"iter {i} loss {batch_loss.item():.4f}")
    return model


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--char-dim", default=8, type=int)
    parser.add_argument("--char-channel-width", default=3, type=int)
    parser.add_argument("--char-channel-size", default=16, type=int)
    parser.add_argument("--dropout", default=0.2, type=float)
    parser.add_argument("--exp-decay-rate", default=0.999, type=float)
    parser.add_argument("--hidden-size", default=16, type=int)
    parser.add_argument("--learning-rate", default=0.5, type=float)
    parser.add_argument("--word-dim", default=16, type=int)
    args = parser.parse_args([])
    args.char_vocab_size, args.word_vocab_size = 40, 200
    args.batch, args.c_len, args.q_len, args.word_len, args.iters = 4, 20, 6, 5, 3
    torch.manual_seed(0)
    vectors = torch.randn(args.word_vocab_size, args.word_dim)  # stands in for GloVe
    train(args, vectors)


if __name__ == "__main__":
    main()
