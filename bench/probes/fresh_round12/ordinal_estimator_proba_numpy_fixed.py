# expect: clean
# source: https://github.com/ayrna/dlordinal/pull/46
"""Ordinal classification experiment in the style of dlordinal: a scikit-learn
like PytorchEstimator wrapper (fit / predict_proba / predict) trains a small
CNN with an ordinal (soft-label) loss on synthetic age-group images, then the
experiment runner evaluates it with numpy ordinal metrics (MAE, AMAE, QWK)."""
import math
from dataclasses import dataclass
from typing import Optional, Union

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


@dataclass
class ExperimentConfig:
    num_classes: int = 5
    image_size: int = 16
    n_train: int = 160
    n_test: int = 64
    batch_size: int = 32
    max_iter: int = 2
    lr: float = 1e-3
    eta: float = 0.85          # weight of the hard label in the soft target
    seed: int = 0


class BaseEstimator:
    """Minimal stand-in for sklearn.base.BaseEstimator (get_params only)."""

    def get_params(self, deep=True):
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}


class TriangularCrossEntropyLoss(nn.Module):
    """Cross entropy against triangular soft labels centred on the true class."""

    def __init__(self, num_classes: int, eta: float = 0.85):
        super().__init__()
        probs = torch.zeros(num_classes, num_classes)
        for k in range(num_classes):
            for j in range(num_classes):
                probs[k, j] = max(0.0, 1.0 - abs(j - k) / 2.0)
            probs[k] /= probs[k].sum()
        eye = torch.eye(num_classes)
        self.register_buffer("targets", eta * eye + (1 - eta) * probs)

    def forward(self, logits, y):
        soft = self.targets[y]
        return -(soft * F.log_softmax(logits, dim=1)).sum(dim=1).mean()


class SmallOrdinalCNN(nn.Module):
    def __init__(self, num_classes: int):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.classifier = nn.Linear(16, num_classes)

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))


class PytorchEstimator(BaseEstimator):
    """Wrapper around a Pytorch ``nn.Module`` implementing the default
    estimator interface defined by ``scikit-learn``."""

    def __init__(self, model, loss_fn, optimizer, device, max_iter, **kwargs):
        self.kwargs = kwargs
        self.model = model
        self.loss_fn = loss_fn
        self.optimizer = optimizer
        self.device = device
        self.max_iter = max_iter

    def fit(self, X: Union[DataLoader, torch.Tensor], y: Optional[torch.Tensor] = None):
        if isinstance(X, DataLoader):
            if y is not None:
                raise ValueError("If X is a DataLoader, y must be None")
            self.model.train()
            for epoch in range(self.max_iter):
                print(f"Epoch {epoch + 1}/{self.max_iter}")
                for _, (X_batch, y_batch) in enumerate(X):
                    self._fit(X_batch, y_batch)
        elif isinstance(X, torch.Tensor):
            if not isinstance(y, torch.Tensor):
                raise ValueError("y must be a torch.Tensor")
            self.model.train()
            for epoch in range(self.max_iter):
                self._fit(X, y)
        else:
            raise ValueError("X must be a DataLoader or a torch Tensor")
        return self

    def _fit(self, X, y):
        X, y = X.to(self.device), y.to(self.device)
        pred = self.model(X)
        loss = self.loss_fn(pred, y)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()

    def predict_proba(self, X: Union[DataLoader, torch.Tensor]):
        if X is None:
            raise ValueError("X must be a DataLoader or a torch Tensor")
        if isinstance(X, DataLoader):
            self.model.eval()
            predictions = []
            for _, (X_batch, _) in enumerate(X):
                predictions.append(self._predict_proba(X_batch))
            return torch.cat(predictions)
        elif isinstance(X, torch.Tensor):
            self.model.eval()
            return self._predict_proba(X)
        raise ValueError("X must be a DataLoader or a torch Tensor")

    def _predict_proba(self, X):
        X = X.to(self.device)
        with torch.no_grad():
            pred = self.model(X)
            probabilities = F.softmax(pred, dim=1)
        return probabilities

    def predict(self, X: Union[DataLoader, torch.Tensor]):
        pred = self.predict_proba(X)
        return torch.argmax(pred, dim=1)


# --------------------------------------------------------------------- metrics
def amae(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    errors = [np.abs(y_pred[y_true == c] - c).mean() for c in np.unique(y_true)]
    return float(np.mean(errors))


def qwk(y_true: np.ndarray, y_pred: np.ndarray, num_classes: int) -> float:
    conf = np.zeros((num_classes, num_classes))
    for t, p in zip(y_true, y_pred):
        conf[t, p] += 1
    w = np.array([[(i - j) ** 2 for j in range(num_classes)] for i in range(num_classes)]) / (num_classes - 1) ** 2
    expected = np.outer(conf.sum(1), conf.sum(0)) / conf.sum()
    return float(1.0 - (w * conf).sum() / max((w * expected).sum(), 1e-12))


def make_data(cfg: ExperimentConfig, n: int, generator: torch.Generator):
    y = torch.randint(0, cfg.num_classes, (n,), generator=generator)
    X = torch.randn(n, 3, cfg.image_size, cfg.image_size, generator=generator)
    X += (y.float() / cfg.num_classes).view(-1, 1, 1, 1)   # make the task learnable
    return X, y


class ExperimentRunner:
    def __init__(self, cfg: ExperimentConfig):
        self.cfg = cfg
        self.history = {}

    def evaluate(self, estimator: PytorchEstimator, loader: DataLoader, targets: torch.Tensor):
        probas = estimator.predict_proba(loader).cpu().numpy()
        y_pred = probas.argmax(axis=1)
        y_true = targets.numpy()
        metrics = {
            "mae": float(np.abs(y_pred - y_true).mean()),
            "amae": amae(y_true, y_pred),
            "qwk": qwk(y_true, y_pred, self.cfg.num_classes),
            "mean_confidence": float(probas.max(axis=1).mean()),
        }
        self.history.update(metrics)
        return metrics

    def run(self):
        cfg = self.cfg
        torch.manual_seed(cfg.seed)
        gen = torch.Generator().manual_seed(cfg.seed)
        X_train, y_train = make_data(cfg, cfg.n_train, gen)
        X_test, y_test = make_data(cfg, cfg.n_test, gen)
        train_loader = DataLoader(TensorDataset(X_train, y_train), batch_size=cfg.batch_size, shuffle=True,
                                  generator=gen)
        test_loader = DataLoader(TensorDataset(X_test, y_test), batch_size=cfg.batch_size, shuffle=False)

        model = SmallOrdinalCNN(cfg.num_classes)
        estimator = PytorchEstimator(
            model=model,
            loss_fn=TriangularCrossEntropyLoss(cfg.num_classes, eta=cfg.eta),
            optimizer=torch.optim.Adam(model.parameters(), lr=cfg.lr),
            device=torch.device("cpu"),
            max_iter=cfg.max_iter,
        )
        estimator.fit(train_loader)
        metrics = self.evaluate(estimator, test_loader, y_test)
        for name, value in metrics.items():
            print(f"{name:>16s}: {value:.4f}" if not math.isnan(value) else f"{name:>16s}: nan")
        return metrics


def main():
    ExperimentRunner(ExperimentConfig()).run()


if __name__ == "__main__":
    main()
