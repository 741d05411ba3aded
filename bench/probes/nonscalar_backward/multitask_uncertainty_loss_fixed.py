# expect: clean
# source: https://github.com/ywatanabe1989/custom_losses_pytorch/issues/3
from dataclasses import dataclass, field
from typing import Callable, Dict, List

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class TrainConfig:
    in_features: int = 12
    hidden: int = 32
    n_classes: int = 4
    batch_size: int = 16
    n_batches: int = 6
    epochs: int = 2
    lr: float = 1e-3
    seed: int = 0
    task_names: List[str] = field(default_factory=lambda: ["age", "bmi", "diagnosis"])


class MultiTaskLoss(torch.nn.Module):
    def __init__(self, is_regression, reduction="none"):
        super(MultiTaskLoss, self).__init__()
        self.is_regression = is_regression
        self.n_tasks = len(is_regression)
        self.log_vars = torch.nn.Parameter(torch.zeros(self.n_tasks))
        self.reduction = reduction

    def forward(self, losses):
        dtype = losses.dtype
        device = losses.device
        stds = (torch.exp(self.log_vars) ** (1 / 2)).to(device).to(dtype)
        self.is_regression = self.is_regression.to(device).to(dtype)
        coeffs = 1 / ((self.is_regression + 1) * (stds ** 2))
        multi_task_losses = coeffs * losses + torch.log(stds)

        if self.reduction == "sum":
            multi_task_losses = multi_task_losses.sum()
        if self.reduction == "mean":
            multi_task_losses = multi_task_losses.mean()

        return multi_task_losses


class SharedTrunkNet(nn.Module):
    def __init__(self, cfg: TrainConfig):
        super().__init__()
        self.trunk = nn.Sequential(
            nn.Linear(cfg.in_features, cfg.hidden),
            nn.ReLU(),
            nn.Linear(cfg.hidden, cfg.hidden),
            nn.ReLU(),
        )
        self.heads = nn.ModuleDict({
            "age": nn.Linear(cfg.hidden, 1),
            "bmi": nn.Linear(cfg.hidden, 1),
            "diagnosis": nn.Linear(cfg.hidden, cfg.n_classes),
        })

    def forward(self, x):
        h = self.trunk(x)
        return {name: head(h) for name, head in self.heads.items()}


def make_synthetic_batches(cfg: TrainConfig):
    rng = np.random.default_rng(cfg.seed)
    batches = []
    for _ in range(cfg.n_batches):
        x = rng.normal(size=(cfg.batch_size, cfg.in_features)).astype(np.float32)
        age = (x[:, :3].sum(1, keepdims=True) * 5 + 40).astype(np.float32)
        bmi = (x[:, 3:6].mean(1, keepdims=True) * 2 + 24).astype(np.float32)
        diag = rng.integers(0, cfg.n_classes, size=cfg.batch_size)
        batches.append({
            "x": torch.from_numpy(x),
            "age": torch.from_numpy(age),
            "bmi": torch.from_numpy(bmi),
            "diagnosis": torch.from_numpy(diag).long(),
        })
    return batches


def task_losses(outputs: Dict[str, torch.Tensor], batch: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    return {
        "age": F.mse_loss(outputs["age"], batch["age"]),
        "bmi": F.mse_loss(outputs["bmi"], batch["bmi"]),
        "diagnosis": F.cross_entropy(outputs["diagnosis"], batch["diagnosis"]),
    }


class HistoryCallback:
    def __init__(self):
        self.history: List[Dict[str, float]] = []

    def on_batch_end(self, epoch, step, losses, total, sigmas):
        row = {k: v.item() for k, v in losses.items()}
        row.update(epoch=epoch, step=step, sigma_age=sigmas[0], sigma_bmi=sigmas[1], sigma_diag=sigmas[2])
        self.history.append(row)

    def on_epoch_end(self, epoch):
        rows = [r for r in self.history if r["epoch"] == epoch]
        print(f"epoch {epoch}: diag={np.mean([r['diagnosis'] for r in rows]):.4f}")


class Trainer:
    def __init__(self, cfg: TrainConfig, callbacks: List = None):
        self.cfg = cfg
        torch.manual_seed(cfg.seed)
        self.model = SharedTrunkNet(cfg)
        is_regression = torch.Tensor([True, True, False])
        self.multitaskloss_instance = MultiTaskLoss(is_regression)
        params = list(self.model.parameters()) + list(self.multitaskloss_instance.parameters())
        self.optimizer = torch.optim.Adam(params, lr=cfg.lr)
        self.callbacks = callbacks or []

    def _fire(self, name: str, *args):
        for cb in self.callbacks:
            fn: Callable = getattr(cb, name, None)
            if fn is not None:
                fn(*args)

    def train_step(self, epoch, step, batch):
        self.model.train()
        self.multitaskloss_instance.train()
        self.optimizer.zero_grad()
        outputs = self.model(batch["x"])
        losses = task_losses(outputs, batch)
        stacked = torch.stack(list(losses.values()))
        multitaskloss = self.multitaskloss_instance(stacked)
        multitaskloss.mean().backward()
        self.optimizer.step()
        sigmas = torch.exp(self.multitaskloss_instance.log_vars / 2).tolist()
        self._fire("on_batch_end", epoch, step, losses, multitaskloss.detach(), sigmas)

    def fit(self, batches):
        for epoch in range(self.cfg.epochs):
            for step, batch in enumerate(batches):
                self.train_step(epoch, step, batch)
            self._fire("on_epoch_end", epoch)


def main():
    cfg = TrainConfig()
    history = HistoryCallback()
    trainer = Trainer(cfg, callbacks=[history])
    trainer.fit(make_synthetic_batches(cfg))
    last = history.history[-1]
    print("final sigmas:", round(last["sigma_age"], 4), round(last["sigma_bmi"], 4), round(last["sigma_diag"], 4))


if __name__ == "__main__":
    main()
