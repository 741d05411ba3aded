# expect: inference_tensor
# source: https://github.com/Genentech/gReLU/pull/8
"""Sequence-to-function model wrapper (gReLU LightningModel style): validate, then fit."""
from copy import deepcopy
from typing import Dict, Optional

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


# ------------------------------------------------------------------ metrics
class Metric(nn.Module):
    """Minimal stateful metric: states are registered with a default and reset to it."""

    def __init__(self):
        super().__init__()
        self._defaults: Dict[str, torch.Tensor] = {}

    def add_state(self, name: str, default: torch.Tensor, dist_reduce_fx: Optional[str] = None):
        self._defaults[name] = default.detach().clone()
        setattr(self, name, default)

    def reset(self) -> None:
        for attr, default in self._defaults.items():
            current_val = getattr(self, attr)
            setattr(self, attr, default.detach().clone().to(current_val.device))

    def forward(self, *args, **kwargs):
        self.update(*args, **kwargs)


class MSE(Metric):
    """Metric class to calculate the MSE for each task."""

    def __init__(self, num_outputs: int = 1, average: bool = True) -> None:
        super().__init__()
        self.add_state("sum_squared_error", default=torch.zeros(num_outputs), dist_reduce_fx="sum")
        self.add_state("total", default=torch.tensor(0), dist_reduce_fx="sum")
        self.average = average

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        if target.dim() > 1:
            self.total += target.shape[0]  # raises
        else:
            self.total += len(target)
        diff = preds.to(torch.float32) - target.to(torch.float32)  # (N, n_tasks, L)
        self.sum_squared_error += diff.square().sum(axis=0).mean(axis=-1)

    def compute(self) -> torch.Tensor:
        output = self.sum_squared_error / self.total
        return output.mean() if self.average else output


class MetricCollection(nn.ModuleDict):
    def __init__(self, metrics: Dict[str, Metric], prefix: str = ""):
        super().__init__()
        for k, v in metrics.items():
            self[prefix + k] = v

    def update(self, preds, target):
        for m in self.values():
            m.update(preds, target)

    def compute(self) -> Dict[str, torch.Tensor]:
        return {k: m.compute() for k, m in self.items()}

    def reset(self):
        for m in self.values():
            m.reset()


# ------------------------------------------------------------------ trainer
class Trainer:
    """Tiny stand-in for lightning.Trainer: evaluation loops run without autograd."""

    def __init__(self, max_epochs: int = 1, inference_mode: bool = True, logger=None):
        self.max_epochs = max_epochs
        self.inference_mode = inference_mode
        self.logged = []

    def _run_eval(self, model, dataloaders, context):
        model.eval()
        with context():
            for batch_idx, batch in enumerate(dataloaders):
                model.validation_step(batch, batch_idx)
            model.on_validation_epoch_end()
        model.train()

    def validate(self, model, dataloaders):
        context = torch.inference_mode if self.inference_mode else torch.no_grad
        self._run_eval(model, dataloaders, context)
        return model.logged[-1]

    def fit(self, model, train_dataloaders, val_dataloaders):
        optimizer = model.configure_optimizers()
        for epoch in range(self.max_epochs):
            model.train()
            for batch_idx, batch in enumerate(train_dataloaders):
                loss = model.training_step(batch, batch_idx)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            self._run_eval(model, val_dataloaders, torch.no_grad)


# ------------------------------------------------------------------ model
class ConvHead(nn.Module):
    def __init__(self, n_tasks: int, channels: int = 16):
        super().__init__()
        self.net = nn.Sequential(nn.Conv1d(4, channels, 5, padding=2), nn.ReLU(),
                                 nn.Conv1d(channels, n_tasks, 1))

    def forward(self, x):
        return self.net(x)


class LightningModel(nn.Module):
    """Wrapper for predictive sequence models."""

    def __init__(self, model_params: dict, train_params: dict = {}) -> None:
        super().__init__()
        self.model_params = model_params
        self.train_params = {"lr": 1e-3, "batch_size": 8, "max_epochs": 2, **train_params}
        self.model = ConvHead(n_tasks=model_params["n_tasks"])
        self.loss = nn.MSELoss()
        metrics = MetricCollection({"mse": MSE(num_outputs=model_params["n_tasks"], average=True)})
        self.val_metrics = deepcopy(metrics)
        self.test_metrics = deepcopy(metrics)
        self.val_losses = []
        self.logged = []

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return self.loss(self(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        preds = self(x)
        self.val_losses.append(self.loss(preds, y))
        self.val_metrics.update(preds, y)

    def on_validation_epoch_end(self):
        val_loss = torch.stack(self.val_losses).mean()
        metrics = self.val_metrics.compute()
        self.logged.append({"val_loss": float(val_loss),
                            **{k: float(v) for k, v in metrics.items()}})
        self.val_metrics.reset()
        self.val_losses = []

    def configure_optimizers(self):
        return torch.optim.Adam(self.model.parameters(), lr=self.train_params["lr"])

    def make_dataloader(self, dataset, shuffle: bool = False):
        return DataLoader(dataset, batch_size=self.train_params["batch_size"], shuffle=shuffle)

    def train_on_dataset(self, train_dataset, val_dataset):
        trainer = Trainer(max_epochs=self.train_params["max_epochs"])
        train_dataloader = self.make_dataloader(train_dataset, shuffle=True)
        val_dataloader = self.make_dataloader(val_dataset)
        # Validation metrics of the untrained model, as a baseline
        baseline = trainer.validate(model=self, dataloaders=val_dataloader)
        print("initial:", baseline)
        trainer.fit(self, train_dataloaders=train_dataloader, val_dataloaders=val_dataloader)
        return trainer


def make_dataset(n: int, seq_len: int = 32, n_tasks: int = 2, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, 4, (n, seq_len), generator=g)
    x = torch.nn.functional.one_hot(idx, 4).permute(0, 2, 1).float()
    w = torch.randn(n_tasks, 4, generator=g)
    y = torch.einsum("tc,ncl->ntl", w, x) + 0.1 * torch.randn(n, n_tasks, seq_len, generator=g)
    return TensorDataset(x, y)


if __name__ == "__main__":
    torch.manual_seed(0)
    np.random.seed(0)
    model = LightningModel(model_params={"n_tasks": 2}, train_params={"max_epochs": 2})
    model.train_on_dataset(make_dataset(48), make_dataset(16, seed=1))
    print("final:", model.logged[-1])
