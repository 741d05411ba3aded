# expect: clean
# source: https://github.com/sgadgil6/cnslab_fmri/issues/4
"""Spatio-temporal graph convolution + LSTM classifier for resting-state fMRI.

Each subject is a (ROI x time) BOLD matrix; a functional-connectivity graph
built from the training set is used by the graph convolution, and an LSTM
summarises the temporal dynamics for a binary phenotype (sex) prediction.
Data are synthetic: two groups differ in the coupling of a small ROI cluster.
"""
import random
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

cfg = SimpleNamespace(
    n_roi=22,
    n_timesteps=50,
    window=25,
    n_subjects=48,
    batch_size=8,
    hidden=32,
    gcn_channels=16,
    epochs=2,
    lr=0.05,
    dropout=0.3,
    seed=11,
)


def set_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def normalized_adjacency(A):
    deg = A.sum(0)
    d_inv = np.zeros_like(deg)
    d_inv[deg > 0] = deg[deg > 0] ** -0.5
    Dn = np.diag(d_inv)
    return Dn @ A @ Dn


def build_graph(train_x, threshold=0.2):
    """Group-average absolute correlation, thresholded, normalised (K=1 kernel)."""
    corr = np.mean([np.corrcoef(s) for s in train_x], axis=0)
    A = (np.abs(corr) > threshold).astype(np.float32) * np.abs(corr).astype(np.float32)
    return torch.tensor(normalized_adjacency(A), dtype=torch.float32)[None]


class ConvTemporalGraphical(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.kernel_size = kernel_size
        self.conv = nn.Conv2d(in_channels, out_channels * kernel_size, kernel_size=(1, 1))

    def forward(self, x, A):
        x = self.conv(x)
        n, kc, t, v = x.size()
        x = x.view(n, self.kernel_size, kc // self.kernel_size, t, v)
        x = torch.einsum("nkctv,kvw->nctw", (x, A))
        return x.contiguous(), A


class FMRILSTM(nn.Module):
    def __init__(self, hidden_dim, input_dim, batch_size, dropout):
        super().__init__()
        self.hidden_dim = hidden_dim
        self.lstm = nn.LSTM(input_dim, hidden_dim, batch_first=True)
        self.linear = nn.Linear(hidden_dim, 1)
        self.dropout = nn.Dropout(p=dropout)
        self.hidden = self.init_hidden(batch_size)

    def init_hidden(self, batch_size):
        return (torch.zeros(1, batch_size, self.hidden_dim),
                torch.zeros(1, batch_size, self.hidden_dim))

    def forward(self, x):
        lstm_out, _ = self.lstm(x)
        out = self.dropout(lstm_out[:, -1, :])
        return torch.sigmoid(self.linear(out))


class STGCNBlock(nn.Module):
    def __init__(self, in_channels, out_channels, n_roi, cfg):
        super().__init__()
        self.gcn = ConvTemporalGraphical(in_channels, out_channels, kernel_size=1)
        self.bn = nn.BatchNorm2d(out_channels)
        self.lstm_layer = FMRILSTM(cfg.hidden, n_roi, cfg.batch_size, cfg.dropout)

    def forward(self, x, A):
        x, A = self.gcn(x, A)
        x = F.relu(self.bn(x))
        x = torch.mean(x, dim=1)          # (N, T, V): average over graph channels
        return self.lstm_layer(x), A


class Model(nn.Module):
    def __init__(self, A, cfg):
        super().__init__()
        self.register_buffer("A", A)
        self.data_bn = nn.BatchNorm1d(cfg.n_roi)
        self.edge_importance = nn.Parameter(torch.ones(A.size()))
        self.st_gcn = STGCNBlock(1, cfg.gcn_channels, cfg.n_roi, cfg)

    def forward(self, x):
        # x: (N, C=1, T, V)
        n, c, t, v = x.size()
        x = x.permute(0, 3, 1, 2).reshape(n, v * c, t)
        x = self.data_bn(x)
        x = x.view(n, v, c, t).permute(0, 2, 3, 1).contiguous()
        out, _ = self.st_gcn(x, self.A * self.edge_importance)
        return out.view(-1)


def make_cohort(cfg, rng):
    xs, ys = [], []
    for s in range(cfg.n_subjects):
        label = s % 2
        latent = rng.standard_normal((3, cfg.n_timesteps))
        mix = rng.standard_normal((cfg.n_roi, 3)) * 0.5
        if label:
            mix[:6, 0] += 1.5
        bold = mix @ latent + 0.8 * rng.standard_normal((cfg.n_roi, cfg.n_timesteps))
        bold = (bold - bold.mean(1, keepdims=True)) / bold.std(1, keepdims=True)
        xs.append(bold.astype(np.float32))
        ys.append(label)
    return xs, np.array(ys, dtype=np.float32)


def random_window(sample, window, rng):
    start = rng.integers(0, sample.shape[1] - window + 1)
    return sample[:, start:start + window]


def iterate_minibatches(xs, ys, cfg, rng):
    order = rng.permutation(len(xs))
    for i in range(0, len(order) - cfg.batch_size + 1, cfg.batch_size):
        idx = order[i:i + cfg.batch_size]
        batch = np.stack([random_window(xs[j], cfg.window, rng).T for j in idx])  # (B, T, V)
        yield torch.from_numpy(batch)[:, None], torch.from_numpy(ys[idx])


def evaluate(model, xs, ys, cfg, rng):
    model.eval()
    correct = 0
    with torch.no_grad():
        for x, y in iterate_minibatches(xs, ys, cfg, rng):
            correct += ((model(x) > 0.5).float() == y).sum().item()
    model.train()
    return correct / max(1, (len(xs) // cfg.batch_size) * cfg.batch_size)


def main():
    set_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    xs, ys = make_cohort(cfg, rng)
    split = int(0.75 * len(xs))
    train_x, train_y, test_x, test_y = xs[:split], ys[:split], xs[split:], ys[split:]
    A = build_graph(train_x)
    model = Model(A, cfg)
    loss_fn = nn.BCELoss()
    optimizer = torch.optim.Adagrad(model.parameters(), lr=cfg.lr)
    for epoch in range(cfg.epochs):
        epoch_loss, n_batches = 0.0, 0
        for x, y in iterate_minibatches(train_x, train_y, cfg, rng):
            model.zero_grad()
            prob = model(x)
            loss = loss_fn(prob, y)
            loss.backward()
            optimizer.step()
            epoch_loss += loss.item()
            n_batches += 1
        acc = evaluate(model, test_x, test_y, cfg, rng)
        print(f"epoch {epoch}: loss {epoch_loss / n_batches:.4f} test acc {acc:.3f}")


if __name__ == "__main__":
    main()
