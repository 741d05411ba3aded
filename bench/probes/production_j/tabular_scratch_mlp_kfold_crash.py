# expect: nonleaf_optimizer
# source: https://github.com/d2l-ai/d2l-en/pull/1713
"""House-price style tabular regression with an MLP written from scratch
(d2l "MLP from scratch" parameters + "weight decay" parameter groups), numeric
standardisation + one-hot categorical features, log-RMSE and K-fold CV.
"""
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn


@dataclass
class HParams:
    num_hiddens: int = 32
    sigma: float = 0.01
    lr: float = 0.05
    weight_decay: float = 1e-3
    num_epochs: int = 8
    batch_size: int = 16
    k: int = 3
    seed: int = 0


# ------------------------------------------------------------------ data
def synth_houses(n, rng):
    area = rng.uniform(50, 250, n)
    rooms = rng.randint(1, 7, n)
    age = rng.uniform(0, 80, n)
    zone = rng.choice(["RL", "RM", "FV", "C"], n)
    zone_bonus = {"RL": 1.15, "RM": 1.0, "FV": 1.3, "C": 0.8}
    price = (1200 * area + 9000 * rooms - 400 * age) * np.array([zone_bonus[z] for z in zone])
    price = price * np.exp(0.05 * rng.randn(n)) + 20000
    return {"area": area, "rooms": rooms, "age": age, "zone": zone}, price


class Preprocessor:
    """Standardise numeric columns, one-hot encode categoricals (fit on train)."""

    def fit(self, cols):
        self.numeric = [k for k, v in cols.items() if v.dtype.kind in "fi"]
        self.categorical = [k for k in cols if k not in self.numeric]
        self.stats = {k: (cols[k].mean(), cols[k].std()) for k in self.numeric}
        self.levels = {k: sorted(set(cols[k])) for k in self.categorical}
        return self

    def transform(self, cols):
        feats = [(cols[k] - m) / s for k, (m, s) in self.stats.items()]
        for k, levels in self.levels.items():
            feats += [(cols[k] == lv).astype(np.float64) for lv in levels]
        return torch.tensor(np.stack(feats, 1), dtype=torch.float32)


# ----------------------------------------------------------------- model
def init_params(num_inputs, num_hiddens, sigma):
    W1 = torch.randn(num_inputs, num_hiddens, requires_grad=True) * sigma
    b1 = torch.zeros(num_hiddens, requires_grad=True)
    W2 = torch.randn(num_hiddens, 1, requires_grad=True) * sigma
    b2 = torch.zeros(1, requires_grad=True)
    return {"W1": W1, "b1": b1, "W2": W2, "b2": b2}


def relu(X):
    a = torch.zeros_like(X)
    return torch.max(X, a)


class ScratchMLP:
    def __init__(self, num_inputs, hp):
        self.params = init_params(num_inputs, hp.num_hiddens, hp.sigma)

    def __call__(self, X):
        H = relu(X @ self.params["W1"] + self.params["b1"])
        return H @ self.params["W2"] + self.params["b2"]

    def weights(self):
        return [self.params["W1"], self.params["W2"]]

    def biases(self):
        return [self.params["b1"], self.params["b2"]]


def log_rmse(net, features, labels):
    with torch.no_grad():
        clipped_preds = torch.clamp(net(features), 1e-2, float("inf"))
        rmse = torch.sqrt(nn.functional.mse_loss(torch.log(clipped_preds), torch.log(labels)))
    return rmse.item()


def make_optimizer(net, hp):
    return torch.optim.SGD([  # raises
        {"params": net.weights(), "weight_decay": hp.weight_decay},
        {"params": net.biases()}], lr=hp.lr)


def train(net, train_features, train_labels, test_features, test_labels, hp):
    train_ls, test_ls = [], []
    optimizer = make_optimizer(net, hp)
    loss = nn.MSELoss()
    n = train_features.shape[0]
    g = torch.Generator().manual_seed(hp.seed)
    for epoch in range(hp.num_epochs):
        perm = torch.randperm(n, generator=g)
        for i in range(0, n, hp.batch_size):
            idx = perm[i:i + hp.batch_size]
            optimizer.zero_grad()
            l = loss(net(train_features[idx]), train_labels[idx])
            l.backward()
            optimizer.step()
        train_ls.append(log_rmse(net, train_features, train_labels))
        if test_labels is not None:
            test_ls.append(log_rmse(net, test_features, test_labels))
    return train_ls, test_ls


def get_k_fold_data(k, i, X, y):
    fold_size = X.shape[0] // k
    X_train, y_train = None, None
    for j in range(k):
        idx = slice(j * fold_size, (j + 1) * fold_size)
        X_part, y_part = X[idx, :], y[idx]
        if j == i:
            X_valid, y_valid = X_part, y_part
        elif X_train is None:
            X_train, y_train = X_part, y_part
        else:
            X_train = torch.cat([X_train, X_part], 0)
            y_train = torch.cat([y_train, y_part], 0)
    return X_train, y_train, X_valid, y_valid


def k_fold(X, y, hp):
    train_l_sum, valid_l_sum = 0, 0
    for i in range(hp.k):
        data = get_k_fold_data(hp.k, i, X, y)
        net = ScratchMLP(X.shape[1], hp)
        train_ls, valid_ls = train(net, *data, hp)
        train_l_sum += train_ls[-1]
        valid_l_sum += valid_ls[-1]
        print(f"fold {i + 1}, train log rmse {float(train_ls[-1]):f}, valid log rmse {float(valid_ls[-1]):f}")
    return train_l_sum / hp.k, valid_l_sum / hp.k


def main():
    hp = HParams()
    torch.manual_seed(hp.seed)
    rng = np.random.RandomState(hp.seed)
    cols, price = synth_houses(96, rng)
    prep = Preprocessor().fit(cols)
    X = prep.transform(cols)
    y = torch.tensor(price, dtype=torch.float32).reshape(-1, 1)
    y = y / y.mean()  # prices in units of the mean sale price
    train_l, valid_l = k_fold(X, y, hp)
    print(f"{hp.k}-fold validation: avg train log rmse: {train_l:f}, avg valid log rmse: {valid_l:f}")


main()
