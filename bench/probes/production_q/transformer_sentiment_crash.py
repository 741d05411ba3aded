# expect: leaf_inplace
# source: https://github.com/Atcold/NYU-DLSP20/issues/765
"""Transformer encoder for review sentiment classification.

Follows the course notebook layout: multi-head self-attention written out by
hand, a position-wise CNN feed-forward block, word + fixed sinusoidal position
embeddings, an encoder stack, and a max-pooled classification head. A small
trainer runs training epochs and a validation pass over synthetic reviews.
"""
import argparse
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

device = torch.device("cpu")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="transformer sentiment classifier")
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--d-model", type=int, default=32)
    parser.add_argument("--num-heads", type=int, default=4)
    parser.add_argument("--conv-hidden-dim", type=int, default=64)
    parser.add_argument("--vocab-size", type=int, default=500)
    parser.add_argument("--max-len", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, p, d_input=None):
        super().__init__()
        self.num_heads = num_heads
        self.d_model = d_model
        if d_input is None:
            d_xq = d_xk = d_xv = d_model
        else:
            d_xq, d_xk, d_xv = d_input
        # Make sure that the embedding dimension of model is a multiple of number of heads
        assert d_model % self.num_heads == 0
        self.d_k = d_model // self.num_heads
        # These are still of dimension d_model. They will be split into number of heads
        self.W_q = nn.Linear(d_xq, d_model, bias=False)
        self.W_k = nn.Linear(d_xk, d_model, bias=False)
        self.W_v = nn.Linear(d_xv, d_model, bias=False)
        # Outputs of all sub-layers need to be of dimension d_model
        self.W_h = nn.Linear(d_model, d_model)

    def scaled_dot_product_attention(self, Q, K, V):
        batch_size = Q.size(0)
        k_length = K.size(-2)
        # Scaling by d_k so that the soft(arg)max doesnt saturate
        Q = Q / np.sqrt(self.d_k)                         # (bs, n_heads, q_length, dim_per_head)
        scores = torch.matmul(Q, K.transpose(2, 3))          # (bs, n_heads, q_length, k_length)
        A = nn.Softmax(dim=-1)(scores)   # (bs, n_heads, q_length, k_length)
        # Get the weighted average of the values
        H = torch.matmul(A, V)     # (bs, n_heads, q_length, dim_per_head)
        return H, A

    def split_heads(self, x, batch_size):
        """Split the last dimension into (heads X depth); return (batch_size X num_heads X seq_length X depth)."""
        return x.view(batch_size, -1, self.num_heads, self.d_k).transpose(1, 2)

    def group_heads(self, x, batch_size):
        """Combine the heads again to get (batch_size X seq_length X (num_heads times d_k))."""
        return x.transpose(1, 2).contiguous().view(batch_size, -1, self.num_heads * self.d_k)

    def forward(self, X_q, X_k, X_v):
        batch_size, seq_length, dim = X_q.size()
        Q = self.split_heads(self.W_q(X_q), batch_size)
        K = self.split_heads(self.W_k(X_k), batch_size)
        V = self.split_heads(self.W_v(X_v), batch_size)
        H_cat, A = self.scaled_dot_product_attention(Q, K, V)
        H_cat = self.group_heads(H_cat, batch_size)    # (bs, q_length, dim)
        H = self.W_h(H_cat)          # (bs, q_length, dim)
        return H, A


class CNN(nn.Module):
    def __init__(self, d_model, hidden_dim, p):
        super().__init__()
        self.k1convL1 = nn.Linear(d_model, hidden_dim)
        self.k1convL2 = nn.Linear(hidden_dim, d_model)
        self.activation = nn.ReLU()

    def forward(self, x):
        x = self.k1convL1(x)
        x = self.activation(x)
        x = self.k1convL2(x)
        return x


class EncoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, conv_hidden_dim, p=0.1):
        super().__init__()
        self.mha = MultiHeadAttention(d_model, num_heads, p)
        self.cnn = CNN(d_model, conv_hidden_dim, p)
        self.layernorm1 = nn.LayerNorm(normalized_shape=d_model, eps=1e-6)
        self.layernorm2 = nn.LayerNorm(normalized_shape=d_model, eps=1e-6)

    def forward(self, x):
        # Multi-head attention
        attn_output, _ = self.mha(x, x, x)  # (batch_size, input_seq_len, d_model)
        # Layer norm after adding the residual connection
        out1 = self.layernorm1(x + attn_output)  # (batch_size, input_seq_len, d_model)
        # Feed forward
        cnn_output = self.cnn(out1)  # (batch_size, input_seq_len, d_model)
        # Second layer norm after adding residual connection
        out2 = self.layernorm2(out1 + cnn_output)  # (batch_size, input_seq_len, d_model)
        return out2


def create_sinusoidal_embeddings(nb_p, dim, E):
    theta = np.array([
        [p / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)]
        for p in range(nb_p)
    ])
    E[:, 0::2] = torch.FloatTensor(np.sin(theta[:, 0::2]))  # raises
    E[:, 1::2] = torch.FloatTensor(np.cos(theta[:, 1::2]))
    E.detach_()
    E.requires_grad = False
    E = E.to(device)


class Embeddings(nn.Module):
    def __init__(self, d_model, vocab_size, max_position_embeddings, p):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, d_model, padding_idx=1)
        self.position_embeddings = nn.Embedding(max_position_embeddings, d_model)
        create_sinusoidal_embeddings(
            nb_p=max_position_embeddings,
            dim=d_model,
            E=self.position_embeddings.weight
        )
        self.LayerNorm = nn.LayerNorm(d_model, eps=1e-12)

    def forward(self, input_ids):
        seq_length = input_ids.size(1)
        position_ids = torch.arange(seq_length, dtype=torch.long, device=input_ids.device)  # (max_seq_length)
        position_ids = position_ids.unsqueeze(0).expand_as(input_ids)                      # (bs, max_seq_length)
        # Get word embeddings for each input id
        word_embeddings = self.word_embeddings(input_ids)                   # (bs, max_seq_length, dim)
        # Get position embeddings for each position id
        position_embeddings = self.position_embeddings(position_ids)        # (bs, max_seq_length, dim)
        # Add them both
        embeddings = word_embeddings + position_embeddings  # (bs, max_seq_length, dim)
        # Layer norm
        embeddings = self.LayerNorm(embeddings)             # (bs, max_seq_length, dim)
        return embeddings


class Encoder(nn.Module):
    def __init__(self, num_layers, d_model, num_heads, ff_hidden_dim, input_vocab_size,
                 maximum_position_encoding, p=0.1):
        super().__init__()
        self.d_model = d_model
        self.num_layers = num_layers
        self.embedding = Embeddings(d_model, input_vocab_size, maximum_position_encoding, p)
        self.enc_layers = nn.ModuleList()
        for _ in range(num_layers):
            self.enc_layers.append(EncoderLayer(d_model, num_heads, ff_hidden_dim, p))

    def forward(self, x):
        x = self.embedding(x)  # Transform to (batch_size, input_seq_length, d_model)
        for i in range(self.num_layers):
            x = self.enc_layers[i](x)
        return x  # (batch_size, input_seq_len, d_model)


class TransformerClassifier(nn.Module):
    def __init__(self, num_layers, d_model, num_heads, conv_hidden_dim, input_vocab_size, num_answers,
                 max_len=512):
        super().__init__()
        self.encoder = Encoder(num_layers, d_model, num_heads, conv_hidden_dim, input_vocab_size,
                               maximum_position_encoding=max_len)
        self.dense = nn.Linear(d_model, num_answers)

    def forward(self, x):
        x = self.encoder(x)
        x, _ = torch.max(x, dim=1)
        x = self.dense(x)
        return x


class SyntheticReviews:
    """Token-id reviews; the label depends on counts of 'positive' and 'negative' word ids."""

    def __init__(self, n, vocab_size, max_len, seed):
        rng = np.random.default_rng(seed)
        self.x = rng.integers(10, vocab_size, size=(n, max_len))
        pos_words, neg_words = np.arange(10, 30), np.arange(30, 50)
        score = np.isin(self.x, pos_words).sum(1) - np.isin(self.x, neg_words).sum(1)
        self.y = (score > 0).astype(np.int64)
        self.x, self.y = torch.from_numpy(self.x), torch.from_numpy(self.y)

    def batches(self, batch_size, shuffle=True):
        idx = torch.randperm(len(self.y)) if shuffle else torch.arange(len(self.y))
        for i in range(0, len(idx), batch_size):
            j = idx[i:i + batch_size]
            yield self.x[j], self.y[j]


class Trainer:
    def __init__(self, model, args, callbacks=()):
        self.model = model.to(device)
        self.args = args
        self.optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=2, gamma=0.5)
        self.callbacks = list(callbacks)

    def train_step(self, x, y):
        self.optimizer.zero_grad()
        out = self.model(x)
        loss = F.cross_entropy(out, y)
        loss.backward()
        self.optimizer.step()
        return loss.item(), (out.argmax(-1) == y).float().sum().item()

    @torch.no_grad()
    def evaluate(self, data):
        self.model.eval()
        correct = sum((self.model(x).argmax(-1) == y).sum().item() for x, y in data.batches(256, False))
        self.model.train()
        return correct / len(data.y)

    def fit(self, train_data, valid_data):
        for epoch in range(self.args.epochs):
            t0, losses, correct = time.time(), [], 0.0
            for x, y in train_data.batches(self.args.batch_size):
                loss, c = self.train_step(x, y)
                losses.append(loss)
                correct += c
            self.scheduler.step()
            logs = {"epoch": epoch, "loss": float(np.mean(losses)), "train_acc": correct / len(train_data.y),
                    "val_acc": self.evaluate(valid_data), "time": time.time() - t0}
            for cb in self.callbacks:
                cb(logs)


def main(argv=None):
    args = parse_args(argv if argv is not None else [])
    torch.manual_seed(args.seed)
    model = TransformerClassifier(num_layers=args.num_layers, d_model=args.d_model, num_heads=args.num_heads,
                                  conv_hidden_dim=args.conv_hidden_dim, input_vocab_size=args.vocab_size,
                                  num_answers=2, max_len=args.max_len)
    train_data = SyntheticReviews(1024, args.vocab_size, args.max_len, args.seed)
    valid_data = SyntheticReviews(256, args.vocab_size, args.max_len, args.seed + 1)
    trainer = Trainer(model, args, callbacks=[lambda logs: print(
        "Epoch: {epoch}, loss: {loss:.4f}, train acc: {train_acc:.3f}, val acc: {val_acc:.3f}".format(**logs))])
    trainer.fit(train_data, valid_data)


if __name__ == "__main__":
    main()
