# expect: clean
# source: https://github.com/Lightning-AI/pytorch-lightning/issues/4487
"""Hamiltonian neural network for multi-step forecasting of physical time series.

The network outputs a scalar energy H(q, p); its vector field is obtained
with torch.autograd.grad inside forward (symplectic gradient).  Trajectories
of a noisy pendulum are forecast by integrating the learned field.  A small
Lightning-like framework (LightningModule-style hooks, a Trainer that runs
the training loop and a validation loop with gradients disabled to save
memory, callbacks and an LR scheduler) drives training.
"""
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class HParams:
    input_size: int = 2
    hidden_size: int = 32
    lr: float = 3e-3
    batch_size: int = 32
    horizon: int = 4
    dt: float = 0.1
    max_epochs: int = 2
    train_batches: int = 4
    val_batches: int = 2
    seed: int = 7


class Feedforward(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.fc1 = nn.Linear(self.input_size, self.hidden_size)
        self.act = nn.Tanh()
        self.fc2 = nn.Linear(self.hidden_size, self.hidden_size)
        self.fc3 = nn.Linear(self.hidden_size, 1)
        self.register_buffer("J", torch.tensor([[0.0, 1.0], [-1.0, 0.0]]))

    def energy(self, x):
        h = self.act(self.fc1(x))
        h = self.act(self.fc2(h))
        return self.fc3(h)

    def forward(self, x):
        output = self.energy(x).sum()
        dH = torch.autograd.grad(outputs=output, inputs=x, retain_graph=True, create_graph=True)[0]
        return dH @ self.J.t()


def rk4_step(field, x, dt):
    k1 = field(x)
    k2 = field(x + 0.5 * dt * k1)
    k3 = field(x + 0.5 * dt * k2)
    k4 = field(x + dt * k3)
    return x + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)


class PendulumSeries:
    """Synthetic pendulum trajectories (q, p) with observation noise."""

    def __init__(self, hp: HParams, split: str):
        self.hp = hp
        self.gen = torch.Generator().manual_seed(hp.seed + (0 if split == "train" else 1))

    def _true_field(self, x):
        q, p = x[..., 0], x[..., 1]
        return torch.stack([p, -torch.sin(q)], dim=-1)

    def batch(self):
        hp = self.hp
        x = (torch.rand(hp.batch_size, 2, generator=self.gen) - 0.5) * 2.0
        traj = [x]
        for _ in range(hp.horizon):
            traj.append(rk4_step(self._true_field, traj[-1], hp.dt))
        traj = torch.stack(traj, dim=1)
        noise = 0.01 * torch.randn(traj.shape, generator=self.gen)
        return traj + noise

    def __iter__(self):
        n = self.hp.train_batches
        for _ in range(n):
            yield self.batch()


class HNNForecaster(nn.Module):
    def __init__(self, hp: HParams):
        super().__init__()
        self.hp = hp
        self.model = Feedforward(hp.input_size, hp.hidden_size)
        self.log_dict = {}

    def forward(self, x0, steps):
        preds = []
        x = x0
        for _ in range(steps):
            x = rk4_step(self.model, x, self.hp.dt)
            preds.append(x)
        return torch.stack(preds, dim=1)

    def _shared_step(self, traj):
        x0 = traj[:, 0].clone().requires_grad_(True)
        preds = self(x0, traj.size(1) - 1)
        return F.mse_loss(preds, traj[:, 1:])

    def training_step(self, batch, batch_idx):
        loss = self._shared_step(batch)
        self.log("train_loss", loss.item())
        return loss

    def validation_step(self, batch, batch_idx):
        torch.set_grad_enabled(True)
        loss = self._shared_step(batch)
        self.log("val_loss", loss.item())
        return loss

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=self.hp.lr)
        sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)
        return opt, sched

    def log(self, key, value):
        self.log_dict.setdefault(key, []).append(value)


class Callback:
    def on_validation_end(self, trainer, module):
        pass


class BestValTracker(Callback):
    def __init__(self):
        self.best = math.inf

    def on_validation_end(self, trainer, module):
        vals = module.log_dict.get("val_loss", [])
        if vals:
            self.best = min(self.best, float(np.mean(vals[-trainer.hp.val_batches:])))


class Trainer:
    def __init__(self, hp: HParams, callbacks=None):
        self.hp = hp
        self.callbacks = callbacks or []

    def _run_train_epoch(self, module, loader, opt):
        module.train()
        for batch_idx, batch in enumerate(loader):
            opt.zero_grad()
            loss = module.training_step(batch, batch_idx)
            loss.backward()
            opt.step()

    def _run_validation(self, module, loader):
        module.eval()
        # disable gradients to save memory
        torch.set_grad_enabled(False)
        try:
            for batch_idx in range(self.hp.val_batches):
                module.validation_step(loader.batch(), batch_idx)
        finally:
            torch.set_grad_enabled(True)
        module.train()
        for cb in self.callbacks:
            cb.on_validation_end(self, module)

    def fit(self, module, train_loader, val_loader):
        opt, sched = module.configure_optimizers()
        for epoch in range(self.hp.max_epochs):
            self._run_train_epoch(module, train_loader, opt)
            sched.step()
            self._run_validation(module, val_loader)
            tl = np.mean(module.log_dict["train_loss"][-self.hp.train_batches:])
            print(f"epoch {epoch}: train_loss={tl:.5f}")


def main():
    hp = HParams()
    torch.manual_seed(hp.seed)
    np.random.seed(hp.seed)
    module = HNNForecaster(hp)
    tracker = BestValTracker()
    trainer = Trainer(hp, callbacks=[tracker])
    trainer.fit(module, PendulumSeries(hp, "train"), PendulumSeries(hp, "val"))
    print("best val loss", tracker.best)


if __name__ == "__main__":
    main()
