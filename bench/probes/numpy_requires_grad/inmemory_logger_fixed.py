# expect: clean
# source: https://github.com/meta-pytorch/tnt/pull/551
from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

import numpy as np
import torch
import torch.nn as nn

logging.basicConfig(level=logging.INFO, format="[%(name)s] %(message)s")
logger = logging.getLogger("train")

Scalar = Union[torch.Tensor, np.ndarray, int, float]


def scalar_to_float(scalar: Scalar) -> float:
    if isinstance(scalar, float):
        return scalar
    if isinstance(scalar, int):
        return float(scalar)
    if isinstance(scalar, torch.Tensor):
        scalar = scalar.squeeze()
        numel = scalar.numel()
        if numel != 1:
            raise ValueError(f"Scalar tensor must contain a single item, {numel} given.")
        scalar = scalar.detach().cpu().numpy()
    if isinstance(scalar, np.ndarray):
        if scalar.size != 1:
            raise ValueError(f"Scalar ndarray must contain a single item, {scalar.size} given.")
        return float(scalar.item())
    raise TypeError(f"Unsupported scalar type {type(scalar)}")


class MetricLogger:
    def log(self, name: str, data: Scalar, step: int) -> None:
        raise NotImplementedError

    def log_dict(self, payload: Dict[str, Scalar], step: int) -> None:
        for k, v in payload.items():
            self.log(k, v, step)

    def close(self) -> None:
        pass


class InMemoryLogger(MetricLogger):
    """Keeps every logged scalar in a dict, keyed by step; handy for tests."""

    def __init__(self) -> None:
        self._log_buffer: Dict[int, Dict[str, float]] = defaultdict(dict)

    @property
    def log_buffer(self) -> Dict[int, Dict[str, float]]:
        return self._log_buffer

    def log(self, name: str, data: Scalar, step: int) -> None:
        self._log_buffer[step][name] = scalar_to_float(data)


@dataclass
class TrainConfig:
    in_dim: int = 20
    hidden: int = 32
    lr: float = 1e-2
    batch_size: int = 16
    max_epochs: int = 2
    log_every_n_steps: int = 5
    seed: int = 0
    tags: List[str] = field(default_factory=lambda: ["integration", "mem-logger"])


class Callback:
    def on_train_step_end(self, step: int, outputs: Dict[str, Any]) -> None:
        pass

    def on_train_epoch_end(self, epoch: int, unit: "RegressionUnit") -> None:
        pass


class LoggingCallback(Callback):
    def __init__(self, metric_logger: MetricLogger, every_n_steps: int) -> None:
        self.metric_logger = metric_logger
        self.every_n_steps = every_n_steps

    def on_train_step_end(self, step: int, outputs: Dict[str, Any]) -> None:
        if step % self.every_n_steps != 0:
            return
        scalars = {f"train/{k}": v for k, v in outputs.items() if isinstance(v, torch.Tensor) and v.numel() == 1}
        self.metric_logger.log_dict(scalars, step)

    def on_train_epoch_end(self, epoch: int, unit: "RegressionUnit") -> None:
        self.metric_logger.log("train/epoch_mse", unit.epoch_mse(), unit.global_step)


class RegressionUnit:
    def __init__(self, cfg: TrainConfig) -> None:
        self.module = nn.Sequential(nn.Linear(cfg.in_dim, cfg.hidden), nn.ReLU(), nn.Linear(cfg.hidden, 1))
        self.optimizer = torch.optim.Adam(self.module.parameters(), lr=cfg.lr)
        self.loss_fn = nn.MSELoss()
        self.global_step = 0
        self._sq_err: List[float] = []

    def train_step(self, batch) -> Dict[str, Any]:
        x, y = batch
        pred = self.module(x).squeeze(-1)
        loss = self.loss_fn(pred, y)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self._sq_err.append(loss.item())
        grad_norm = torch.sqrt(sum(p.grad.pow(2).sum() for p in self.module.parameters()))
        self.global_step += 1
        return {"loss": loss, "grad_norm": grad_norm, "pred": pred}

    def epoch_mse(self) -> float:
        mse = float(np.mean(self._sq_err))
        self._sq_err.clear()
        return mse


def make_batches(cfg: TrainConfig, n: int = 160):
    g = torch.Generator().manual_seed(cfg.seed)
    x = torch.randn(n, cfg.in_dim, generator=g)
    w = torch.randn(cfg.in_dim, generator=g)
    y = x @ w + 0.1 * torch.randn(n, generator=g)
    return [(x[i:i + cfg.batch_size], y[i:i + cfg.batch_size]) for i in range(0, n, cfg.batch_size)]


def train(unit: RegressionUnit, batches, cfg: TrainConfig, callbacks: Optional[List[Callback]] = None) -> None:
    callbacks = callbacks or []
    for epoch in range(cfg.max_epochs):
        for batch in batches:
            outputs = unit.train_step(batch)
            for cb in callbacks:
                cb.on_train_step_end(unit.global_step, outputs)
        for cb in callbacks:
            cb.on_train_epoch_end(epoch, unit)
        logger.info("epoch %d done at step %d", epoch, unit.global_step)


def main() -> None:
    cfg = TrainConfig()
    torch.manual_seed(cfg.seed)
    mem_logger = InMemoryLogger()
    unit = RegressionUnit(cfg)
    train(unit, make_batches(cfg), cfg, callbacks=[LoggingCallback(mem_logger, cfg.log_every_n_steps)])
    buf = mem_logger.log_buffer
    steps = sorted(buf)
    logger.info("logged %d steps (tags=%s)", len(steps), ",".join(cfg.tags))
    for s in steps:
        logger.info("step %3d: %s", s, {k: round(v, 4) for k, v in buf[s].items()})
    mem_logger.close()


if __name__ == "__main__":
    main()
