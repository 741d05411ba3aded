# expect: clean
# source: https://github.com/nianticlabs/monodepth2/issues/24
"""Unsupervised anomaly detection on multivariate sensor windows.

A 1-D convolutional autoencoder is trained on (mostly normal) windows.  An
exponential running estimate of the score distribution gives the alarm
threshold mean + k*std.  After a warm-up epoch the training set is assumed
to be contaminated, so windows scoring above the running threshold are
trimmed from the reconstruction loss (robust / trimmed AE training).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Config:
    seed = 21
    n_channels = 3
    window = 32
    n_train = 96
    n_test = 48
    contamination = 0.05
    latent = 8
    batch_size = 16
    epochs = 3
    warmup_epochs = 1
    lr = 2e-3
    threshold_k = 3.0
    threshold_momentum = 0.9


def make_windows(n, cfg, anomaly_rate, gen):
    t = torch.linspace(0, 4 * math.pi, cfg.window)
    freq = 1 + torch.rand(n, cfg.n_channels, 1, generator=gen)
    phase = 2 * math.pi * torch.rand(n, cfg.n_channels, 1, generator=gen)
    x = torch.sin(freq * t + phase) + 0.05 * torch.randn(n, cfg.n_channels, cfg.window, generator=gen)
    labels = torch.rand(n, generator=gen) < anomaly_rate
    for i in labels.nonzero(as_tuple=True)[0].tolist():
        c = int(torch.randint(0, cfg.n_channels, (1,), generator=gen))
        s = int(torch.randint(0, cfg.window - 6, (1,), generator=gen))
        x[i, c, s:s + 6] += 2.5 * torch.sign(torch.randn(1, generator=gen))
    return x, labels


class ConvAutoencoder(nn.Module):
    def __init__(self, n_channels, latent):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv1d(n_channels, 16, 5, stride=2, padding=2), nn.ReLU(),
            nn.Conv1d(16, latent, 5, stride=2, padding=2), nn.ReLU())
        self.decoder = nn.Sequential(
            nn.ConvTranspose1d(latent, 16, 4, stride=2, padding=1), nn.ReLU(),
            nn.ConvTranspose1d(16, n_channels, 4, stride=2, padding=1))

    def forward(self, x):
        return self.decoder(self.encoder(x))


class RunningThreshold:
    def __init__(self, k, momentum):
        self.k, self.momentum = k, momentum
        self.mean, self.var = None, None

    def update(self, scores):
        m, v = scores.mean().item(), scores.var(unbiased=False).item()
        if self.mean is None:
            self.mean, self.var = m, v
        else:
            self.mean = self.momentum * self.mean + (1 - self.momentum) * m
            self.var = self.momentum * self.var + (1 - self.momentum) * v

    @property
    def value(self):
        return float("inf") if self.mean is None else self.mean + self.k * math.sqrt(self.var)


class AnomalyDetector:
    def __init__(self, model, threshold):
        self.model = model
        self.threshold = threshold

    def reconstruction_error(self, x):
        return F.mse_loss(self.model(x), x, reduction="none").mean(dim=(1, 2))

    @torch.no_grad()
    def anomaly_score(self, x):
        return self.reconstruction_error(x)

    def predict(self, x):
        return self.anomaly_score(x) > self.threshold.value


class TrimmedAETrainer:
    def __init__(self, cfg):
        self.cfg = cfg
        gen = torch.Generator().manual_seed(cfg.seed)
        self.x_train, _ = make_windows(cfg.n_train, cfg, cfg.contamination, gen)
        self.x_test, self.y_test = make_windows(cfg.n_test, cfg, 0.25, gen)
        self.model = ConvAutoencoder(cfg.n_channels, cfg.latent)
        self.threshold = RunningThreshold(cfg.threshold_k, cfg.threshold_momentum)
        self.detector = AnomalyDetector(self.model, self.threshold)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.lr)

    def batches(self):
        perm = torch.randperm(self.x_train.size(0))
        for i in range(0, len(perm), self.cfg.batch_size):
            yield self.x_train[perm[i:i + self.cfg.batch_size]]

    def warmup_loss(self, x):
        return F.mse_loss(self.model(x), x)

    def trimmed_loss(self, x):
        scores = self.detector.reconstruction_error(x)
        keep = scores.detach() <= self.threshold.value
        if keep.sum() == 0:
            keep = torch.ones_like(keep)
        return scores[keep].mean(), int((~keep).sum())

    def train_epoch(self, epoch):
        self.model.train()
        total, trimmed, n = 0.0, 0, 0
        for x in self.batches():
            if epoch < self.cfg.warmup_epochs:
                loss = self.warmup_loss(x)
            else:
                loss, n_trim = self.trimmed_loss(x)
                trimmed += n_trim
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            self.threshold.update(self.detector.anomaly_score(x))
            total += loss.item() * x.size(0)
            n += x.size(0)
        return total / n, trimmed

    def evaluate(self):
        self.model.eval()
        pred = self.detector.predict(self.x_test)
        tp = (pred & self.y_test).sum().item()
        precision = tp / max(1, pred.sum().item())
        recall = tp / max(1, self.y_test.sum().item())
        return precision, recall

    def fit(self):
        for epoch in range(self.cfg.epochs):
            loss, trimmed = self.train_epoch(epoch)
            p, r = self.evaluate()
            print(f"epoch {epoch} loss {loss:.4f} thr {self.threshold.value:.4f} "
                  f"trimmed {trimmed} precision {p:.2f} recall {r:.2f}")


if __name__ == "__main__":
    torch.manual_seed(Config.seed)
    TrimmedAETrainer(Config).fit()
