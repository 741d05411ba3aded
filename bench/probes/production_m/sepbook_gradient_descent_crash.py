# expect: leaf_inplace
# source: https://github.com/source-separation/tutorial/issues/18
"""Training chapter of an open source-separation book: gradient-descent based
optimization explained on a one-unit network (y = m x + b) before moving to
deep mask-inference models.  The chapter's notebook cells are organised as
helpers: brute-force loss landscape, gradient field, plain gradient descent,
a learning-rate sweep, gradient-norm monitoring ("signs of healthy
training") and gradient clipping.  Plots are replaced by printed summaries.
"""
import copy
import random
from dataclasses import dataclass
from typing import Dict, List

import numpy as np
import torch
from torch import nn


def seed(random_seed):
    """Same behaviour as nussl.utils.seed for the parts used here."""
    random.seed(random_seed)
    np.random.seed(random_seed)
    torch.manual_seed(random_seed)


seed(0)
to_numpy = lambda x: x.detach().numpy()
to_tensor = lambda x: torch.from_numpy(x).reshape(-1, 1).float()


class Line(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(1, 1)

    def forward(self, x):
        y = self.layer(x)
        return y


@dataclass
class ChapterConfig:
    n_points: int = 100
    noise_std: float = 0.1
    grid: int = 25
    n_iter: int = 60
    learning_rate: float = 0.01
    learning_rates: tuple = (1.0, 0.5, 0.1, 0.01, 0.001)
    clip_value: float = 1.0


def make_training_data(cfg):
    m = np.random.randn()
    b = np.random.randn()
    x = np.linspace(-10, 10, cfg.n_points)
    noise = np.random.normal(loc=0, scale=cfg.noise_std, size=cfg.n_points)
    y = m * x + b + noise
    return x, y, m, b


def l1_loss(line, x, y):
    y_hat = line(to_tensor(x))
    return (y_hat - to_tensor(y)).abs().mean()


class LossLandscape:
    """Brute force: evaluate the loss for every (m, b) on a grid."""

    def __init__(self, line, x, y, lo=-2.0, hi=2.0, steps=25):
        self.line, self.x, self.y = line, x, y
        self.possible_m = np.linspace(lo, hi, steps)
        self.possible_b = np.linspace(lo, hi, steps)

    def compute(self):
        loss = np.empty((self.possible_m.shape[0], self.possible_b.shape[0]))
        for i, m_hat in enumerate(self.possible_m):
            for j, b_hat in enumerate(self.possible_b):
                self.line.layer.weight[0, 0] = m_hat  # raises
                self.line.layer.bias[0] = b_hat
                _loss = l1_loss(self.line, self.x, self.y)
                loss[i, j] = _loss.item()
        return loss

    def argmin(self, loss):
        idx = np.unravel_index(np.argmin(loss, axis=None), loss.shape)
        return self.possible_m[idx[0]], self.possible_b[idx[1]]


class GradientField:
    """The gradient of the loss w.r.t. m and b, evaluated on the same grid."""

    def __init__(self, x, y, lo=-1.0, hi=1.0, steps=25):
        self.x, self.y = x, y
        self.possible_m = np.linspace(lo, hi, steps)
        self.possible_b = np.linspace(lo, hi, steps)

    def compute(self):
        grad_m = np.empty((self.possible_m.shape[0], self.possible_b.shape[0]))
        grad_b = np.empty_like(grad_m)
        for i, m_hat in enumerate(self.possible_m):
            for j, b_hat in enumerate(self.possible_b):
                line = Line()
                with torch.no_grad():
                    line.layer.weight[0, 0] = m_hat
                    line.layer.bias[0] = b_hat
                _loss = l1_loss(line, self.x, self.y)
                _loss.backward()
                grad_m[i, j] = line.layer.weight.grad.item()
                grad_b[i, j] = line.layer.bias.grad.item()
        return grad_m, grad_b


class GradNormMonitor:
    """Signs of healthy training: keep track of the loss and the gradient norm."""

    def __init__(self):
        self.log: Dict[str, List[float]] = {"loss": [], "grad_norm": []}

    def __call__(self, model, loss):
        grad_norm = torch.norm(torch.stack([p.grad.norm() for p in model.parameters()]))
        self.log["loss"].append(loss.item())
        self.log["grad_norm"].append(grad_norm.item())


def train_with_gradient_descent(line, x, y, n_iter, learning_rate, monitor=None, clip_value=None):
    for _ in range(n_iter):
        line.zero_grad()
        _loss = l1_loss(line, x, y)
        _loss.backward()
        if clip_value is not None:
            torch.nn.utils.clip_grad_norm_(line.parameters(), clip_value)
        if monitor is not None:
            monitor(line, _loss)
        for n, p in line.named_parameters():
            p.data += - learning_rate * p.grad
    return l1_loss(line, x, y).item()


def learning_rate_sweep(x, y, cfg):
    line = Line()
    lines = [copy.deepcopy(line) for _ in cfg.learning_rates]
    return {lr: train_with_gradient_descent(l, x, y, cfg.n_iter, lr) for lr, l in zip(cfg.learning_rates, lines)}


def run_chapter(cfg):
    x, y, m, b = make_training_data(cfg)

    line = Line()
    landscape = LossLandscape(line, x, y, steps=cfg.grid)
    loss = landscape.compute()
    m_hat, b_hat = landscape.argmin(loss)
    print(f"Loss minimum of {loss.min():-2f} at \n\t m_hat={m_hat:0.2f}, b_hat={b_hat:-.2f}")
    print(f"Actual m, b: \n\t m={m:.2f}, b={b:.2f}")

    grad_m, grad_b = GradientField(x, y, steps=cfg.grid).compute()
    print("mean gradient wrt m at the grid edges:", grad_m.mean(axis=1)[[0, -1]])

    monitor = GradNormMonitor()
    final = train_with_gradient_descent(Line(), x, y, cfg.n_iter, cfg.learning_rate, monitor=monitor)
    print(f"gradient descent: final loss {final:.4f}, last grad norm {monitor.log['grad_norm'][-1]:.4f}")

    for lr, final in learning_rate_sweep(x, y, cfg).items():
        print(f"lr={lr:<6} final loss {final:.4f}")

    clipped = train_with_gradient_descent(Line(), x, y, cfg.n_iter, 0.5, clip_value=cfg.clip_value)
    print(f"lr=0.5 with gradient clipping: final loss {clipped:.4f}")


if __name__ == "__main__":
    run_chapter(ChapterConfig())
