# expect: grad_unused
# source: https://github.com/TomerRonen34/treeboost_autograd/issues/1
"""Click-through-rate prediction with gradient-boosted trees and a PyTorch loss.

The booster side follows the CatBoost/LightGBM custom-objective protocol: an
objective object exposes calc_ders_range(approxes, targets, weights) and
returns first and second derivatives per sample.  As in treeboost_autograd,
those derivatives are obtained with torch.autograd from an arbitrary PyTorch
loss function, here a position-debiased focal log-loss for CTR.  A tiny
histogram-based boosting machine with depth-1 trees, feature hashing of
categorical fields, early stopping and AUC/logloss evaluation completes the
pipeline.  Impression logs are synthetic.
"""
from dataclasses import dataclass
from typing import Callable, List, Tuple

import numpy as np
import torch
from torch import Tensor


class PytorchObjective:
    def __init__(self, loss_function: Callable[[Tensor, Tensor], Tensor], sign: int = -1):
        self.loss_function = loss_function
        self.sign = sign

    def calc_ders_range(self, preds, targets, weights=None) -> List[Tuple[float, float]]:
        deriv1, deriv2 = self.calculate_derivatives(preds, targets, weights)
        return list(zip(deriv1, deriv2))

    def calculate_derivatives(self, preds, targets, weights):
        preds = torch.tensor(np.asarray(preds), dtype=torch.float64, requires_grad=True)
        targets = torch.tensor(np.asarray(targets), dtype=torch.float64)
        objective = self.sign * self.loss_function(preds, targets)
        deriv1, deriv2 = self._calculate_derivatives(objective, preds)
        if weights is not None:
            w = np.asarray(weights)
            deriv1, deriv2 = deriv1 * w, deriv2 * w
        return deriv1, deriv2

    @staticmethod
    def _calculate_derivatives(objective: Tensor, preds: Tensor) -> Tuple[np.ndarray, np.ndarray]:
        deriv1, = torch.autograd.grad(objective, preds, create_graph=True)  # raises
        deriv2 = []
        for i in range(len(preds)):
            d2, = torch.autograd.grad(deriv1[i], preds, retain_graph=True)
            deriv2.append(d2[i].item())
        return deriv1.detach().numpy(), np.array(deriv2)


@dataclass
class CTRLossConfig:
    gamma: float = 1.0
    position_bias: float = 0.2
    eps: float = 1e-7


def make_focal_ctr_loss(cfg: CTRLossConfig):
    def focal_ctr_loss(preds, targets):
        logits = torch.tensor(preds.tolist(), dtype=torch.float64, requires_grad=True)
        p = torch.sigmoid(logits).clamp(cfg.eps, 1 - cfg.eps)
        pt = torch.where(targets > 0.5, p, 1 - p)
        weight = (1 - pt) ** cfg.gamma
        return -(weight * torch.log(pt)).sum() * (1 - cfg.position_bias)
    return focal_ctr_loss


class Stump:
    def fit(self, X, grad, hess, n_bins=16, l2=1.0):
        best = (-np.inf, None)
        for j in range(X.shape[1]):
            edges = np.unique(np.quantile(X[:, j], np.linspace(0, 1, n_bins + 1)[1:-1]))
            for thr in edges:
                left = X[:, j] <= thr
                gl, hl, gr, hr = grad[left].sum(), hess[left].sum(), grad[~left].sum(), hess[~left].sum()
                gain = gl ** 2 / (hl + l2) + gr ** 2 / (hr + l2)
                if gain > best[0]:
                    best = (gain, (j, thr, -gl / (hl + l2), -gr / (hr + l2)))
        self.j, self.thr, self.lv, self.rv = best[1]
        return self

    def predict(self, X):
        return np.where(X[:, self.j] <= self.thr, self.lv, self.rv)


class CustomObjectiveBooster:
    def __init__(self, loss_function, iterations=5, learning_rate=0.3, early_stopping_rounds=3):
        self.loss_function = loss_function
        self.iterations, self.learning_rate = iterations, learning_rate
        self.early_stopping_rounds = early_stopping_rounds
        self.trees, self.base = [], 0.0

    def fit(self, X, y, eval_set=None):
        self.base = float(np.log(y.mean() / (1 - y.mean())))
        approx = np.full(len(y), self.base)
        best, since_best = np.inf, 0
        for it in range(self.iterations):
            ders = self.loss_function.calc_ders_range(approx, y)
            der1 = np.array([d[0] for d in ders])
            der2 = np.array([d[1] for d in ders])
            tree = Stump().fit(X, -der1, -der2)
            self.trees.append(tree)
            approx += self.learning_rate * tree.predict(X)
            if eval_set is not None:
                Xv, yv = eval_set
                ll = logloss(yv, self.predict_proba(Xv))
                print(f"iter {it}: valid logloss {ll:.4f} auc {auc(yv, self.predict_proba(Xv)):.3f}")
                best, since_best = (ll, 0) if ll < best else (best, since_best + 1)
                if since_best >= self.early_stopping_rounds:
                    break
        return self

    def predict_proba(self, X):
        raw = self.base + sum(self.learning_rate * t.predict(X) for t in self.trees)
        return 1 / (1 + np.exp(-raw))


def logloss(y, p, eps=1e-7):
    p = np.clip(p, eps, 1 - eps)
    return float(-(y * np.log(p) + (1 - y) * np.log(1 - p)).mean())


def auc(y, p):
    order = np.argsort(p)
    ranks = np.empty(len(p))
    ranks[order] = np.arange(1, len(p) + 1)
    pos = y == 1
    return float((ranks[pos].sum() - pos.sum() * (pos.sum() + 1) / 2) / max(1, pos.sum() * (~pos).sum()))


def hash_features(fields, n_buckets=8):
    return np.stack([(np.vectorize(hash)(col) % n_buckets).astype(np.float64) for col in fields], 1)


def synthetic_impressions(n, seed):
    rng = np.random.default_rng(seed)
    position = rng.integers(1, 6, n)
    ad_category = rng.choice(['shoes', 'phones', 'books', 'travel'], n)
    hour = rng.integers(0, 24, n)
    dense = rng.normal(size=(n, 2))
    logit = -2.0 - 0.3 * position + (ad_category == 'travel') * 0.8 + dense[:, 0]
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.float64)
    X = np.concatenate([position[:, None], hash_features([ad_category, hour.astype(str)]), dense], 1)
    return X, y


def main():
    np.random.seed(0)
    torch.manual_seed(0)
    X_train, y_train = synthetic_impressions(300, seed=1)
    X_valid, y_valid = synthetic_impressions(150, seed=2)
    objective = PytorchObjective(make_focal_ctr_loss(CTRLossConfig()))
    booster = CustomObjectiveBooster(objective, iterations=4)
    booster.fit(X_train, y_train, eval_set=(X_valid, y_valid))
    print('final valid auc', auc(y_valid, booster.predict_proba(X_valid)))


if __name__ == '__main__':
    main()
