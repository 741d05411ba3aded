# expect: clean
# source: https://devgem.io/posts/understanding-pytorch-s-runtimeerror-backward-through-the-graph-a-second-time
"""Two-stage tabular pipeline: autoencoder pre-training, then a classifier on codes.

Stage 1 fits a dense autoencoder on synthetic sensor features (Adam + cosine
schedule, early stopping callback). Stage 2 encodes the training split with the
frozen-in-eval-mode autoencoder and trains a small attention-pooling classifier
on the codes; the classifier's forward returns (logits, loss, accuracy) the way
the original script did. SimpleNamespace config, CPU only.
"""
import math
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def get_config():
    return SimpleNamespace(
        seed=7, n_samples=384, n_features=24, n_classes=4,
        ae=SimpleNamespace(hidden=32, code=8, lr=3e-3, epochs=4, batch_size=64, patience=3),
        clf=SimpleNamespace(n_tokens=4, d_model=16, lr=2e-3, weight_decay=1e-4, max_iters=3, batch_size=64,
                            warmup=5),
        log_every=2,
    )


def make_data(cfg):
    rng = np.random.RandomState(cfg.seed)
    centers = rng.randn(cfg.n_classes, cfg.n_features) * 2.0
    y = rng.randint(0, cfg.n_classes, size=cfg.n_samples)
    x = centers[y] + rng.randn(cfg.n_samples, cfg.n_features)
    x = (x - x.mean(0)) / (x.std(0) + 1e-6)
    split = int(0.75 * cfg.n_samples)
    to_t = lambda a, dt: torch.tensor(a, dtype=dt)
    return (to_t(x[:split], torch.float32), to_t(y[:split], torch.long),
            to_t(x[split:], torch.float32), to_t(y[split:], torch.long))


class AutoEncoder(nn.Module):
    def __init__(self, n_in, hidden, code):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(n_in, hidden), nn.GELU(), nn.Linear(hidden, code), nn.Tanh())
        self.decoder = nn.Sequential(nn.Linear(code, hidden), nn.GELU(), nn.Linear(hidden, n_in))

    def encode(self, x):
        return self.encoder(x)

    def forward(self, x):
        z = self.encode(x)
        recon = self.decoder(z)
        return z, F.mse_loss(recon, x)


class EarlyStopping:
    def __init__(self, patience):
        self.patience, self.best, self.bad = patience, math.inf, 0

    def step(self, value):
        if value < self.best - 1e-4:
            self.best, self.bad = value, 0
        else:
            self.bad += 1
        return self.bad > self.patience


class AETrainer:
    def __init__(self, model, cfg):
        self.model = model
        self.cfg = cfg
        self.optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, T_max=cfg.epochs)
        self.stopper = EarlyStopping(cfg.patience)

    def train_step(self, xb):
        self.optimizer.zero_grad()
        _, loss = self.model(xb)
        loss.backward()
        self.optimizer.step()
        return loss.item()

    @torch.no_grad()
    def evaluate(self, x):
        self.model.eval()
        _, loss = self.model(x)
        self.model.train()
        return loss.item()

    def fit(self, x_train, x_val):
        g = torch.Generator().manual_seed(0)
        for epoch in range(self.cfg.epochs):
            perm = torch.randperm(len(x_train), generator=g)
            losses = [self.train_step(x_train[perm[i:i + self.cfg.batch_size]])
                      for i in range(0, len(x_train), self.cfg.batch_size)]
            self.scheduler.step()
            val = self.evaluate(x_val)
            print(f"[ae] epoch {epoch} train {np.mean(losses):.4f} val {val:.4f}")
            if self.stopper.step(val):
                break
        return self.model


class CodeClassifier(nn.Module):
    """Splits a code vector into pseudo-tokens, attention-pools them, classifies."""

    def __init__(self, code_dim, n_tokens, d_model, n_classes):
        super().__init__()
        assert code_dim % n_tokens == 0
        self.n_tokens = n_tokens
        self.proj = nn.Linear(code_dim // n_tokens, d_model)
        self.pos = nn.Parameter(torch.zeros(1, n_tokens, d_model))
        self.attn = nn.MultiheadAttention(d_model, num_heads=2, batch_first=True)
        self.query = nn.Parameter(torch.randn(1, 1, d_model) * 0.02)
        self.head = nn.Sequential(nn.LayerNorm(d_model), nn.Linear(d_model, n_classes))

    def forward(self, codes, targets=None):
        b = codes.size(0)
        tokens = self.proj(codes.view(b, self.n_tokens, -1)) + self.pos
        pooled, _ = self.attn(self.query.expand(b, -1, -1), tokens, tokens)
        logits = self.head(pooled.squeeze(1))
        if targets is None:
            return logits, None, None
        loss = F.cross_entropy(logits, targets)
        accuracy = (logits.argmax(-1) == targets).float().mean()
        return logits, loss, accuracy


def warmup_lambda(warmup):
    return lambda step: min(1.0, (step + 1) / warmup)


class ClassifierRunner:
    def __init__(self, model, cfg, log_every):
        self.model = model
        self.cfg = cfg
        self.log_every = log_every
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, warmup_lambda(cfg.warmup))
        self.history = []
        self.step = 0

    def train_step(self, xb, yb):
        out, loss, accuracy = self.model(xb, yb)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.scheduler.step()
        self.step += 1
        return loss.item(), accuracy.item()

    @torch.no_grad()
    def evaluate(self, x, y):
        self.model.eval()
        _, loss, acc = self.model(x, y)
        self.model.train()
        return loss.item(), acc.item()

    def fit(self, X_train_tensor, y_train_tensor, X_val, y_val):
        batch_size = self.cfg.batch_size
        for it in range(self.cfg.max_iters):
            start_ix = 0
            while start_ix < len(X_train_tensor):
                end_ix = min(start_ix + batch_size, len(X_train_tensor))
                loss, acc = self.train_step(X_train_tensor[start_ix:end_ix], y_train_tensor[start_ix:end_ix])
                if self.step % self.log_every == 0:
                    print(f"[clf] iter {it} step {self.step} loss {loss:.4f} acc {acc:.3f}")
                start_ix = end_ix
            val_loss, val_acc = self.evaluate(X_val, y_val)
            self.history.append((val_loss, val_acc))
            print(f"[clf] iter {it} val loss {val_loss:.4f} acc {val_acc:.3f}")


def encode_dataset(autoencoder, x):
    autoencoder.eval()
    with torch.no_grad():
        X_encoded = autoencoder.encode(x)
    return X_encoded


def main():
    cfg = get_config()
    torch.manual_seed(cfg.seed)
    x_tr, y_tr, x_va, y_va = make_data(cfg)

    autoencoder = AutoEncoder(cfg.n_features, cfg.ae.hidden, cfg.ae.code)
    AETrainer(autoencoder, cfg.ae).fit(x_tr, x_va)

    X_train_encoded = encode_dataset(autoencoder, x_tr)
    X_val_encoded = encode_dataset(autoencoder, x_va)

    clf = CodeClassifier(cfg.ae.code, cfg.clf.n_tokens, cfg.clf.d_model, cfg.n_classes)
    runner = ClassifierRunner(clf, cfg.clf, cfg.log_every)
    runner.fit(X_train_encoded, y_tr, X_val_encoded, y_va)
    print("final val", runner.history[-1])


if __name__ == "__main__":
    main()
