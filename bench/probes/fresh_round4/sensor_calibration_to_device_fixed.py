# expect: clean
# source: https://discuss.pytorch.org/t/tensor-to-device-changes-is-leaf-causing-cant-optimize-a-non-leaf-tensor/37659
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(11)
RNG = np.random.default_rng(11)


@dataclass
class Config:
    n_sensors: int = 6
    n_samples: int = 256
    hidden: int = 32
    lr_model: float = 1e-2
    lr_calib: float = 5e-2
    batch_size: int = 32
    epochs: int = 4
    patience: int = 3
    device: str = "cpu"
    calib_keys: tuple = field(default=("gain", "offset"))


def make_sensor_table(cfg):
    true_gain = RNG.uniform(0.5, 2.0, size=cfg.n_sensors)
    true_offset = RNG.normal(0.0, 0.5, size=cfg.n_sensors)
    clean = RNG.normal(size=(cfg.n_samples, cfg.n_sensors))
    raw = clean * true_gain + true_offset
    target = np.sin(clean[:, :3]).sum(axis=1, keepdims=True) + 0.1 * clean[:, 3:].sum(axis=1, keepdims=True)
    return raw, target


class SensorBatches:
    def __init__(self, raw, target, batch_size, device):
        self.x = torch.from_numpy(raw).to(device)
        self.y = torch.from_numpy(target).to(device)
        self.batch_size = batch_size

    def __iter__(self):
        perm = torch.randperm(self.x.shape[0])
        for i in range(0, len(perm), self.batch_size):
            idx = perm[i:i + self.batch_size]
            yield self.x[idx], self.y[idx]

    def sample(self):
        return self.x[: self.batch_size]


def to_like(t, ref):
    return t.to(device=ref.device, dtype=ref.dtype)


def learnable(shape, fill, ref):
    t = to_like(torch.full(shape, float(fill)), ref)
    return t.requires_grad_(True)


class Calibrator:
    def __init__(self, n_sensors, ref):
        self.gain = learnable((n_sensors,), 1.0, ref)
        self.offset = learnable((n_sensors,), 0.0, ref)

    def __call__(self, raw):
        return (raw - self.offset) / self.gain

    def tensors(self):
        return [self.gain, self.offset]

    def state(self):
        return {"gain": self.gain.detach().clone(), "offset": self.offset.detach().clone()}


class Regressor(nn.Module):
    def __init__(self, n_in, hidden):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(n_in, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def forward(self, x):
        return self.net(x)


class EarlyStopping:
    def __init__(self, patience):
        self.patience = patience
        self.best = float("inf")
        self.bad = 0
        self.snapshot = None

    def step(self, value, snapshot):
        if value < self.best - 1e-6:
            self.best, self.bad, self.snapshot = value, 0, snapshot
            return False
        self.bad += 1
        return self.bad >= self.patience


def build_optimizer(cfg, model, calibrator):
    groups = [
        {"params": list(model.parameters()), "lr": cfg.lr_model},
        {"params": calibrator.tensors(), "lr": cfg.lr_calib},
    ]
    return torch.optim.Adam(groups)


def run_epoch(model, calibrator, batches, optimizer, loss_fn):
    model.train()
    total, count = 0.0, 0
    for xb, yb in batches:
        optimizer.zero_grad()
        loss = loss_fn(model(calibrator(xb)), yb)
        loss.backward()
        optimizer.step()
        total += loss.item() * xb.shape[0]
        count += xb.shape[0]
    return total / count


@torch.no_grad()
def evaluate(model, calibrator, batches, loss_fn):
    model.eval()
    return loss_fn(model(calibrator(batches.x)), batches.y).item()


def main():
    cfg = Config()
    raw, target = make_sensor_table(cfg)
    batches = SensorBatches(raw, target, cfg.batch_size, cfg.device)
    ref = batches.sample()
    model = Regressor(cfg.n_sensors, cfg.hidden).to(device=ref.device, dtype=ref.dtype)
    calibrator = Calibrator(cfg.n_sensors, ref)
    optimizer = build_optimizer(cfg, model, calibrator)
    loss_fn = nn.MSELoss()
    stopper = EarlyStopping(cfg.patience)
    for epoch in range(cfg.epochs):
        train_loss = run_epoch(model, calibrator, batches, optimizer, loss_fn)
        val_loss = evaluate(model, calibrator, batches, loss_fn)
        print(f"epoch {epoch}: train {train_loss:.4f} val {val_loss:.4f}")
        if stopper.step(val_loss, calibrator.state()):
            break
    print("best", round(stopper.best, 4), {k: v.numpy().round(3).tolist() for k, v in stopper.snapshot.items()})


if __name__ == "__main__":
    main()
