# expect: clean
# source: https://github.com/mlech26l/ncps/issues/62
"""Closed-form continuous-time (CfC) network for multivariate sensor forecasting.

A long, irregularly sampled sensor recording is cut into consecutive windows; the CfC
reads a window (with its time spans) and predicts the next value of every channel.  The
hidden state hx is carried over from one window to the next so that the model sees the
recording as one continuous stream (stateful training), and it is reset at each epoch.
"""
import math
from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)
np.random.seed(0)


@dataclass
class CfCConfig:
    in_features: int = 4
    units: int = 16
    out_features: int = 4
    mode: str = "default"
    backbone_units: int = 32
    backbone_layers: int = 1
    backbone_dropout: float = 0.0


@dataclass
class TrainConfig:
    window: int = 12
    batch_size: int = 8
    epochs: int = 2
    lr: float = 5e-3
    lr_step: int = 1
    lr_gamma: float = 0.5
    clip_norm: float = 1.0
    model: CfCConfig = field(default_factory=CfCConfig)


class LeCun(nn.Module):
    def __init__(self):
        super().__init__()
        self.tanh = nn.Tanh()

    def forward(self, x):
        return 1.7159 * self.tanh(0.666 * x)


class CfCCell(nn.Module):
    def __init__(self, input_size, hidden_size, mode="default", backbone_units=128,
                 backbone_layers=1, backbone_dropout=0.0):
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        allowed_modes = ["default", "pure", "no_gate"]
        if mode not in allowed_modes:
            raise ValueError(f"Unknown mode '{mode}', valid options are {allowed_modes}")
        self.mode = mode
        layer_list = [nn.Linear(input_size + hidden_size, backbone_units), LeCun()]
        for _ in range(1, backbone_layers):
            layer_list.append(nn.Linear(backbone_units, backbone_units))
            layer_list.append(LeCun())
            if backbone_dropout > 0.0:
                layer_list.append(nn.Dropout(backbone_dropout))
        self.backbone = nn.Sequential(*layer_list)
        self.tanh = nn.Tanh()
        self.sigmoid = nn.Sigmoid()
        cat_shape = backbone_units
        self.ff1 = nn.Linear(cat_shape, hidden_size)
        if self.mode == "pure":
            self.w_tau = nn.Parameter(torch.zeros(1, hidden_size))
            self.A = nn.Parameter(torch.ones(1, hidden_size))
        else:
            self.ff2 = nn.Linear(cat_shape, hidden_size)
            self.time_a = nn.Linear(cat_shape, hidden_size)
            self.time_b = nn.Linear(cat_shape, hidden_size)
        self.init_weights()

    def init_weights(self):
        for w in self.parameters():
            if w.dim() == 2 and w.requires_grad:
                nn.init.xavier_uniform_(w)

    def forward(self, input, hx, ts):
        x = torch.cat([input, hx], 1)
        x = self.backbone(x)
        if self.mode == "pure":
            ff1 = self.ff1(x)
            new_hidden = (-self.A * torch.exp(-ts * (torch.abs(self.w_tau) + torch.abs(ff1))) * ff1 + self.A)
        else:
            ff1 = self.tanh(self.ff1(x))
            ff2 = self.tanh(self.ff2(x))
            t_a = self.time_a(x)
            t_b = self.time_b(x)
            t_interp = self.sigmoid(t_a * ts + t_b)
            if self.mode == "no_gate":
                new_hidden = ff1 + t_interp * ff2
            else:
                new_hidden = ff1 * (1.0 - t_interp) + t_interp * ff2
        return new_hidden, new_hidden


class CfC(nn.Module):
    def __init__(self, cfg: CfCConfig):
        super().__init__()
        self.state_size = cfg.units
        self.rnn_cell = CfCCell(cfg.in_features, cfg.units, cfg.mode, cfg.backbone_units,
                                cfg.backbone_layers, cfg.backbone_dropout)
        self.fc = nn.Linear(cfg.units, cfg.out_features)

    def forward(self, input, hx=None, timespans=None):
        batch_size, seq_len = input.size(0), input.size(1)
        if hx is None:
            hx = torch.zeros((batch_size, self.state_size), device=input.device)
        for t in range(seq_len):
            inputs = input[:, t]
            ts = 1.0 if timespans is None else timespans[:, t].unsqueeze(-1)
            h_out, hx = self.rnn_cell.forward(inputs, hx, ts)
        readout = self.fc(h_out)
        return readout, hx


class SensorStream:
    """Irregularly sampled multichannel signal, served as consecutive (stateful) windows."""

    def __init__(self, n_streams, length, channels, window):
        t = np.cumsum(np.random.uniform(0.5, 1.5, size=(n_streams, length)), axis=1)
        phase = np.random.uniform(0, 2 * math.pi, size=(n_streams, 1, channels))
        freq = np.linspace(0.05, 0.2, channels)[None, None, :]
        x = np.sin(t[:, :, None] * freq + phase) + 0.05 * np.random.randn(n_streams, length, channels)
        self.x = torch.tensor(x, dtype=torch.float32)
        self.dt = torch.tensor(np.diff(t, prepend=0.0, axis=1), dtype=torch.float32)
        self.window = window

    def __iter__(self):
        length = self.x.size(1)
        for start in range(0, length - self.window - 1, self.window):
            end = start + self.window
            yield self.x[:, start:end], self.dt[:, start:end], self.x[:, end]


class LossHistory:
    def __init__(self):
        self.train: List[float] = []
        self.val: List[float] = []

    def on_epoch_end(self, epoch, train_loss, val_loss):
        self.train.append(train_loss)
        self.val.append(val_loss)
        print(f"epoch {epoch}: train {train_loss:.4f}  val {val_loss:.4f}")


class EarlyStopping:
    def __init__(self, patience=3):
        self.patience = patience
        self.best = float("inf")
        self.bad = 0
        self.stop = False

    def on_epoch_end(self, epoch, train_loss, val_loss):
        if val_loss < self.best - 1e-4:
            self.best, self.bad = val_loss, 0
        else:
            self.bad += 1
            self.stop = self.bad >= self.patience


class Runner:
    def __init__(self, cfg: TrainConfig, callbacks):
        self.cfg = cfg
        self.model = CfC(cfg.model)
        self.criterion = nn.MSELoss()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.lr)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, cfg.lr_step, cfg.lr_gamma)
        self.callbacks = callbacks
        self.hx: Optional[torch.Tensor] = None

    def reset_state(self):
        self.hx = None

    def train_step(self, x, dt, y):
        self.model.train()
        self.optimizer.zero_grad()
        pred, hx = self.model(x, self.hx, timespans=dt)
        loss = self.criterion(pred, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip_norm)
        self.optimizer.step()
        self.hx = hx.detach()
        return loss.item()

    @torch.no_grad()
    def evaluate(self, stream):
        self.model.eval()
        hx, losses = None, []
        for x, dt, y in stream:
            pred, hx = self.model(x, hx, timespans=dt)
            losses.append(self.criterion(pred, y).item())
        return float(np.mean(losses))

    def fit(self, train_stream, val_stream):
        for epoch in range(self.cfg.epochs):
            self.reset_state()
            losses = [self.train_step(x, dt, y) for x, dt, y in train_stream]
            self.scheduler.step()
            val = self.evaluate(val_stream)
            for cb in self.callbacks:
                cb.on_epoch_end(epoch, float(np.mean(losses)), val)
            if any(getattr(cb, "stop", False) for cb in self.callbacks):
                break


def main():
    cfg = TrainConfig()
    train_stream = SensorStream(cfg.batch_size, 80, cfg.model.in_features, cfg.window)
    val_stream = SensorStream(cfg.batch_size, 40, cfg.model.in_features, cfg.window)
    history = LossHistory()
    runner = Runner(cfg, [history, EarlyStopping(patience=2)])
    runner.fit(train_stream, val_stream)
    print("best val", min(history.val))


if __name__ == "__main__":
    main()
