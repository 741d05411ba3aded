# expect: clean
# source: https://blog.youkuaiyun.com/windhawk_fly/article/details/143405685
"""Stateful LSTM forecaster for multivariate load / sensor time series.

Sliding windows of a long multivariate series are fed in order; the LSTM state is
carried from one window to the next so the model sees the series as one long
sequence.  The model predicts the next step of every channel.  A small runner with
a config namespace, warm-up + cosine schedule, gradient clipping, early stopping and a
validation pass.  Synthetic seasonal data, CPU only.
"""
import math
import random
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn


def set_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


CFG = SimpleNamespace(
    num_channels=6,
    embedding_dim=6,
    hidden_dim=32,
    num_layers=2,
    window=24,
    batch_size=8,
    epochs=2,
    lr=3e-3,
    warmup_steps=2,
    clip=1.0,
    patience=3,
    log_every=2,
)


class SeasonalSeries:
    """Synthetic series: daily + weekly seasonality, trend and noise."""

    def __init__(self, cfg, length=8 * 24 * 6, seed=0):
        rng = np.random.RandomState(seed)
        t = np.arange(length)[:, None]
        phase = rng.uniform(0, 2 * np.pi, size=(1, cfg.num_channels))
        daily = np.sin(2 * np.pi * t / 24 + phase)
        weekly = 0.5 * np.sin(2 * np.pi * t / (24 * 7) + phase)
        trend = 0.001 * t
        noise = 0.1 * rng.randn(length, cfg.num_channels)
        self.values = (daily + weekly + trend + noise).astype(np.float32)
        self.mean = self.values.mean(0, keepdims=True)
        self.std = self.values.std(0, keepdims=True) + 1e-6

    def normalized(self):
        return (self.values - self.mean) / self.std


class WindowLoader:
    """Consecutive (input, target) windows; batch b holds stream b of the series."""

    def __init__(self, series, cfg):
        data = torch.from_numpy(series)
        n_streams = cfg.batch_size
        per_stream = data.shape[0] // n_streams
        streams = data[: per_stream * n_streams].view(n_streams, per_stream, -1)
        self.batches = []
        for start in range(0, per_stream - cfg.window - 1, cfg.window):
            x = streams[:, start:start + cfg.window]
            y = streams[:, start + 1:start + cfg.window + 1]
            self.batches.append((x, y))
        self.batches = self.batches[:4]

    def __iter__(self):
        return iter(self.batches)

    def __len__(self):
        return len(self.batches)


class LSTMForecaster(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_proj = nn.Linear(cfg.num_channels, cfg.hidden_dim)
        self.lstm = nn.LSTM(cfg.hidden_dim, cfg.hidden_dim, num_layers=cfg.num_layers,
                            batch_first=True, dropout=0.1)
        self.head = nn.Sequential(nn.Linear(cfg.hidden_dim, cfg.hidden_dim), nn.ReLU(),
                                  nn.Linear(cfg.hidden_dim, cfg.embedding_dim))

    def forward(self, x, h0, c0):
        z = self.input_proj(x)
        out, (hn, cn) = self.lstm(z, (h0, c0))
        return self.head(out), (hn, cn)


def warmup_cosine(step, warmup, total):
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1 + math.cos(math.pi * progress))


class EarlyStopping:
    def __init__(self, patience):
        self.patience = patience
        self.best = float("inf")
        self.bad_epochs = 0

    def step(self, value):
        if value < self.best - 1e-4:
            self.best = value
            self.bad_epochs = 0
            return False
        self.bad_epochs += 1
        return self.bad_epochs >= self.patience


class Runner:
    def __init__(self, cfg, train_loader, valid_loader):
        self.cfg = cfg
        self.lstm = LSTMForecaster(cfg)
        self.loss_fn = nn.MSELoss()
        self.optimizer = torch.optim.AdamW(self.lstm.parameters(), lr=cfg.lr, weight_decay=1e-4)
        total = cfg.epochs * len(train_loader)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: warmup_cosine(s, cfg.warmup_steps, total))
        self.train_loader = train_loader
        self.valid_loader = valid_loader
        self.stopper = EarlyStopping(cfg.patience)
        self.history = []

    def init_state(self):
        shape = (self.cfg.num_layers, self.cfg.batch_size, self.cfg.hidden_dim)
        h0 = torch.randn(shape, requires_grad=False)
        c0 = torch.randn(shape, requires_grad=False)
        return h0, c0

    def train_epoch(self, epoch):
        self.lstm.train()
        batch_num = 0
        batch_count = len(self.train_loader)
        h0, c0 = self.init_state()
        for batch in self.train_loader:
            self.optimizer.zero_grad()
            output, (h0, c0) = self.lstm(batch[0], h0, c0)
            h0, c0 = h0.detach(), c0.detach()
            loss = self.loss_fn(output.reshape(-1, self.cfg.embedding_dim),
                                batch[1].reshape(-1, self.cfg.embedding_dim))
            loss.backward()
            nn.utils.clip_grad_norm_(self.lstm.parameters(), self.cfg.clip)
            self.optimizer.step()
            self.scheduler.step()
            batch_num += 1
            if batch_num % min(self.cfg.log_every, max(batch_count // 2, 1)) == 0:
                print(f"epoch {epoch} : batch {batch_num} : {loss.item():.4f}")
            self.history.append(loss.item())

    @torch.no_grad()
    def validate(self):
        self.lstm.eval()
        h0, c0 = self.init_state()
        losses = []
        for x, y in self.valid_loader:
            out, (h0, c0) = self.lstm(x, h0, c0)
            losses.append(self.loss_fn(out, y).item())
        return float(np.mean(losses))

    def fit(self):
        for epoch in range(self.cfg.epochs):
            self.train_epoch(epoch)
            val = self.validate()
            print(f"epoch {epoch} valid mse {val:.4f}")
            if self.stopper.step(val):
                print("early stopping")
                break
        return self.history


def main():
    set_seed(0)
    train = SeasonalSeries(CFG, seed=0).normalized()
    valid = SeasonalSeries(CFG, seed=1).normalized()
    runner = Runner(CFG, WindowLoader(train, CFG), WindowLoader(valid, CFG))
    runner.fit()


if __name__ == "__main__":
    main()
