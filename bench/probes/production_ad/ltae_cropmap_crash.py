# expect: inplace_version
# source: https://github.com/torchgeo/torchgeo/issues/3735
"""Crop-type mapping from Sentinel-2 satellite image time series.

A pixel-set encoder summarises the pixels of each agricultural parcel at every
acquisition date, a Lightweight Temporal Attention Encoder (L-TAE, as shipped in
torchgeo.models) turns the sequence of date embeddings into one parcel embedding
and a small decoder predicts the crop class.  Training is driven by a
Lightning-style task/trainer pair with callbacks, two parameter groups, a warmup
+ cosine schedule and a validation pass after each epoch.  Data are synthetic.
"""
import math
import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor


@dataclass
class ExperimentConfig:
    num_bands: int = 10          # Sentinel-2 L2A bands kept
    num_dates: int = 12          # acquisitions per season
    pixels_per_parcel: int = 16
    num_classes: int = 6
    batch_size: int = 16
    epochs: int = 2
    steps_per_epoch: int = 4
    lr: float = 1e-3
    weight_decay: float = 1e-4
    warmup_steps: int = 2
    ltae: dict = field(default_factory=lambda: dict(
        in_channels=64, n_head=4, d_k=8, n_neurons=(64, 32), dropout=0.2,
        d_model=64, T=1000))


class PositionalEncoding(nn.Module):
    """Positional encoding module using sinusoidal functions."""

    def __init__(self, d_model: int, dropout: float = 0.1, T: int = 1000) -> None:
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        position = torch.arange(T).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(T) / d_model))
        pe = torch.zeros(1, T, d_model)
        pe[0, :, 0::2] = torch.sin(position * div_term)
        pe[0, :, 1::2] = torch.cos(position * div_term)
        self.register_buffer('pe', pe)

    def forward(self, x: Tensor) -> Tensor:
        pe = self.pe[:, : x.size(1)]
        return self.dropout(x + pe)


class LTAE(nn.Module):
    """Lightweight Temporal Attention Encoder (L-TAE)."""

    def __init__(self, in_channels: int = 128, n_head: int = 16, d_k: int = 8,
                 n_neurons: Sequence[int] = (256, 128), dropout: float = 0.2,
                 d_model: int | None = 256, T: int = 1000, len_max_seq: int = 24,
                 positions: Sequence[int] | None = None) -> None:
        super().__init__()
        self.in_channels = in_channels
        self.positions = positions
        self.n_neurons = n_neurons
        self.d_model = d_model if d_model is not None else in_channels
        self.inconv: nn.Sequential | None = None
        if d_model is not None:
            self.inconv = nn.Sequential(
                nn.Conv1d(in_channels, d_model, 1), nn.LayerNorm([d_model, len_max_seq]))
        self.pos_encoder = PositionalEncoding(self.d_model, dropout, T)
        self.attention = nn.MultiheadAttention(
            embed_dim=self.d_model, num_heads=n_head, dropout=dropout, batch_first=True)
        self.inlayernorm = nn.LayerNorm(self.in_channels)
        self.outlayernorm = nn.LayerNorm(n_neurons[-1])
        assert self.n_neurons[0] == self.d_model

        activation = nn.ReLU(inplace=True)
        layers = []
        for i in range(len(self.n_neurons) - 1):
            layers.extend([
                nn.Linear(self.n_neurons[i], self.n_neurons[i + 1]),
                nn.BatchNorm1d(self.n_neurons[i + 1]),
                activation,
            ])
        self.mlp = nn.Sequential(*layers)
        self.dropout = nn.Dropout(dropout, inplace=True)

    def forward(self, x: Tensor) -> Tensor:
        x = self.inlayernorm(x)
        if self.inconv is not None:
            x = self.inconv(x.permute(0, 2, 1)).permute(0, 2, 1)
        x = self.pos_encoder(x)
        attention_output, _ = self.attention(x, x, x)
        mlp_input = attention_output.mean(dim=1)
        output: Tensor = self.outlayernorm(self.dropout(self.mlp(mlp_input)))
        return output


class PixelSetEncoder(nn.Module):
    """Shared MLP over the pixels of a parcel followed by mean/std pooling."""

    def __init__(self, num_bands: int, hidden: int = 32, out_dim: int = 64) -> None:
        super().__init__()
        self.mlp1 = nn.Sequential(nn.Linear(num_bands, hidden), nn.ReLU())
        self.mlp2 = nn.Sequential(nn.Linear(2 * hidden, out_dim), nn.ReLU())

    def forward(self, pixels: Tensor) -> Tensor:
        # pixels: (B, T, S, C) -> (B, T, out_dim)
        h = self.mlp1(pixels)
        pooled = torch.cat([h.mean(dim=2), h.std(dim=2)], dim=-1)
        return self.mlp2(pooled)


class PSETAE(nn.Module):
    def __init__(self, cfg: ExperimentConfig) -> None:
        super().__init__()
        self.spatial = PixelSetEncoder(cfg.num_bands, out_dim=cfg.ltae['in_channels'])
        self.temporal = LTAE(len_max_seq=cfg.num_dates, **cfg.ltae)
        self.decoder = nn.Sequential(
            nn.Linear(cfg.ltae['n_neurons'][-1], 32), nn.ReLU(), nn.Linear(32, cfg.num_classes))

    def forward(self, pixels: Tensor) -> Tensor:
        return self.decoder(self.temporal(self.spatial(pixels)))


def synthetic_parcels(cfg: ExperimentConfig, n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, cfg.num_classes, (n,), generator=g)
    phase = labels.float().view(-1, 1, 1, 1) * 0.5
    t = torch.linspace(0, math.pi, cfg.num_dates).view(1, -1, 1, 1)
    ndvi_like = torch.sin(t + phase)
    pixels = ndvi_like + 0.3 * torch.randn(
        n, cfg.num_dates, cfg.pixels_per_parcel, cfg.num_bands, generator=g)
    return pixels, labels


class ClassificationTask:
    """Mirrors a LightningModule: holds the model, losses and metrics."""

    def __init__(self, cfg: ExperimentConfig) -> None:
        self.cfg = cfg
        self.model = PSETAE(cfg)
        self.criterion = nn.CrossEntropyLoss(label_smoothing=0.05)

    def training_step(self, batch):
        pixels, labels = batch
        logits = self.model(pixels)
        return self.criterion(logits, labels)

    @torch.no_grad()
    def validation_step(self, batch):
        pixels, labels = batch
        logits = self.model(pixels)
        acc = (logits.argmax(-1) == labels).float().mean().item()
        return {'val_loss': self.criterion(logits, labels).item(), 'val_acc': acc}

    def configure_optimizers(self):
        encoder_params = list(self.model.spatial.parameters()) + list(self.model.temporal.parameters())
        optimizer = torch.optim.AdamW([
            {'params': encoder_params, 'lr': self.cfg.lr},
            {'params': self.model.decoder.parameters(), 'lr': self.cfg.lr * 2},
        ], weight_decay=self.cfg.weight_decay)
        total = self.cfg.epochs * self.cfg.steps_per_epoch

        def lr_lambda(step):
            if step < self.cfg.warmup_steps:
                return (step + 1) / self.cfg.warmup_steps
            progress = (step - self.cfg.warmup_steps) / max(1, total - self.cfg.warmup_steps)
            return 0.5 * (1.0 + math.cos(math.pi * progress))

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
        return optimizer, scheduler


class Callback:
    def on_train_batch_end(self, trainer, loss): ...
    def on_validation_end(self, trainer, metrics): ...


class LearningRateMonitor(Callback):
    def __init__(self):
        self.history = []

    def on_train_batch_end(self, trainer, loss):
        self.history.append([g['lr'] for g in trainer.optimizer.param_groups])


class EarlyStopping(Callback):
    def __init__(self, monitor='val_loss', patience=3):
        self.monitor, self.patience = monitor, patience
        self.best, self.wait = float('inf'), 0

    def on_validation_end(self, trainer, metrics):
        if metrics[self.monitor] < self.best:
            self.best, self.wait = metrics[self.monitor], 0
        else:
            self.wait += 1
            trainer.should_stop = self.wait >= self.patience


class Trainer:
    def __init__(self, cfg: ExperimentConfig, callbacks=()) -> None:
        self.cfg = cfg
        self.callbacks = list(callbacks)
        self.should_stop = False
        self.global_step = 0

    def _batches(self, pixels, labels):
        perm = torch.randperm(len(labels))
        for i in range(self.cfg.steps_per_epoch):
            idx = perm[i * self.cfg.batch_size:(i + 1) * self.cfg.batch_size]
            yield pixels[idx], labels[idx]

    def fit(self, task: ClassificationTask, train_data, val_data):
        self.optimizer, self.scheduler = task.configure_optimizers()
        for epoch in range(self.cfg.epochs):
            task.model.train()
            for batch in self._batches(*train_data):
                self.optimizer.zero_grad(set_to_none=True)
                loss = task.training_step(batch)
                loss.backward()  # raises
                torch.nn.utils.clip_grad_norm_(task.model.parameters(), 5.0)
                self.optimizer.step()
                self.scheduler.step()
                self.global_step += 1
                for cb in self.callbacks:
                    cb.on_train_batch_end(self, loss.item())
            task.model.eval()
            metrics = task.validation_step(val_data)
            print(f"epoch {epoch} step {self.global_step} {metrics}")
            for cb in self.callbacks:
                cb.on_validation_end(self, metrics)
            if self.should_stop:
                break


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--epochs', type=int, default=2)
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args([])
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    cfg = ExperimentConfig(epochs=args.epochs)
    train_data = synthetic_parcels(cfg, cfg.batch_size * cfg.steps_per_epoch, seed=1)
    val_data = synthetic_parcels(cfg, 32, seed=2)
    task = ClassificationTask(cfg)
    trainer = Trainer(cfg, callbacks=[LearningRateMonitor(), EarlyStopping(patience=2)])
    trainer.fit(task, train_data, val_data)


if __name__ == '__main__':
    main()
