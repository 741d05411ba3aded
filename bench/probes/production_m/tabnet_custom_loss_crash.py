# expect: inplace_version
# source: https://github.com/dreamquark-ai/tabnet/issues/312
"""TabNet regression on a synthetic tabular dataset with a user-defined RMSE
loss and RMSPE eval metric, as in a Kaggle volatility notebook.

Condensed from pytorch_tabnet: GBN / GLU feature transformers, an attentive
transformer with sparsemax masks and the sparsity regulariser (M_loss), and
the TabModel estimator (fit / _train_epoch / _train_batch / _predict_epoch,
History and EarlyStopping callbacks, weighted sampling off).
"""
from dataclasses import dataclass, field
from typing import Any, Dict, List

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
np.random.seed(0)


# ------------------------------------------------------------------ sparsemax.py
def sparsemax(z, dim=-1):
    z_sorted, _ = torch.sort(z, dim=dim, descending=True)
    k = torch.arange(1, z.shape[dim] + 1, dtype=z.dtype).view(1, -1)
    z_cumsum = z_sorted.cumsum(dim)
    support = (1 + k * z_sorted) > z_cumsum
    k_z = support.sum(dim=dim, keepdim=True)
    tau = (z_cumsum.gather(dim, k_z - 1) - 1) / k_z.to(z.dtype)
    return torch.clamp(z - tau, min=0)


# ------------------------------------------------------------------ tab_network.py
class GBN(nn.Module):
    """Ghost Batch Normalization."""

    def __init__(self, input_dim, virtual_batch_size=32, momentum=0.02):
        super().__init__()
        self.virtual_batch_size = virtual_batch_size
        self.bn = nn.BatchNorm1d(input_dim, momentum=momentum)

    def forward(self, x):
        chunks = x.chunk(int(np.ceil(x.shape[0] / self.virtual_batch_size)), 0)
        return torch.cat([self.bn(x_) for x_ in chunks], dim=0)


class GLU_Layer(nn.Module):
    def __init__(self, input_dim, output_dim, fc=None, virtual_batch_size=32):
        super().__init__()
        self.output_dim = output_dim
        self.fc = fc if fc is not None else nn.Linear(input_dim, 2 * output_dim, bias=False)
        self.bn = GBN(2 * output_dim, virtual_batch_size=virtual_batch_size)

    def forward(self, x):
        x = self.bn(self.fc(x))
        return torch.mul(x[:, : self.output_dim], torch.sigmoid(x[:, self.output_dim:]))


class FeatTransformer(nn.Module):
    def __init__(self, input_dim, output_dim, shared_layers, n_independent, virtual_batch_size):
        super().__init__()
        self.scale = torch.sqrt(torch.FloatTensor([0.5]))
        layers, dim = [], input_dim
        for fc in shared_layers:
            layers.append(GLU_Layer(dim, output_dim, fc=fc, virtual_batch_size=virtual_batch_size))
            dim = output_dim
        for _ in range(n_independent):
            layers.append(GLU_Layer(dim, output_dim, virtual_batch_size=virtual_batch_size))
            dim = output_dim
        self.glu_layers = nn.ModuleList(layers)

    def forward(self, x):
        x = self.glu_layers[0](x)
        for glu in self.glu_layers[1:]:
            x = torch.add(x, glu(x)) * self.scale
        return x


class AttentiveTransformer(nn.Module):
    def __init__(self, input_dim, output_dim, virtual_batch_size):
        super().__init__()
        self.fc = nn.Linear(input_dim, output_dim, bias=False)
        self.bn = GBN(output_dim, virtual_batch_size=virtual_batch_size)

    def forward(self, priors, processed_feat):
        x = self.bn(self.fc(processed_feat))
        return sparsemax(torch.mul(x, priors))


class TabNetNoEmbeddings(nn.Module):
    def __init__(self, input_dim, output_dim, n_d=8, n_a=8, n_steps=3, gamma=1.3,
                 n_independent=2, n_shared=2, epsilon=1e-15, virtual_batch_size=32):
        super().__init__()
        self.n_d, self.n_a, self.n_steps, self.gamma, self.epsilon = n_d, n_a, n_steps, gamma, epsilon
        self.initial_bn = nn.BatchNorm1d(input_dim, momentum=0.01)
        shared = [nn.Linear(input_dim if i == 0 else n_d + n_a, 2 * (n_d + n_a), bias=False) for i in range(n_shared)]
        self.initial_splitter = FeatTransformer(input_dim, n_d + n_a, shared, n_independent, virtual_batch_size)
        self.feat_transformers = nn.ModuleList(
            [FeatTransformer(input_dim, n_d + n_a, shared, n_independent, virtual_batch_size) for _ in range(n_steps)])
        self.att_transformers = nn.ModuleList(
            [AttentiveTransformer(n_a, input_dim, virtual_batch_size) for _ in range(n_steps)])
        self.final_mapping = nn.Linear(n_d, output_dim, bias=False)

    def forward(self, x):
        res = 0
        x = self.initial_bn(x)
        prior = torch.ones(x.shape)
        M_loss = 0
        att = self.initial_splitter(x)[:, self.n_d:]
        for step in range(self.n_steps):
            M = self.att_transformers[step](prior, att)
            M_loss += torch.mean(torch.sum(torch.mul(M, torch.log(M + self.epsilon)), dim=1))
            prior = torch.mul(self.gamma - M, prior)
            out = self.feat_transformers[step](torch.mul(M, x))
            res = torch.add(res, torch.relu(out[:, : self.n_d]))
            att = out[:, self.n_d:]
        M_loss /= self.n_steps
        return self.final_mapping(res), M_loss


# ------------------------------------------------------------------ callbacks.py
class History:
    def __init__(self):
        self.history: Dict[str, List[float]] = {"loss": []}

    def on_epoch_end(self, epoch, logs):
        for k, v in logs.items():
            self.history.setdefault(k, []).append(v)


class EarlyStopping:
    def __init__(self, early_stopping_metric, patience):
        self.metric, self.patience = early_stopping_metric, patience
        self.best, self.wait, self.stop_training = np.inf, 0, False

    def on_epoch_end(self, epoch, logs):
        current = logs[self.metric]
        if current < self.best:
            self.best, self.wait = current, 0
        else:
            self.wait += 1
            self.stop_training = self.wait >= self.patience


# ------------------------------------------------------------------ abstract_model.py
@dataclass
class TabModel:
    n_d: int = 8
    n_a: int = 8
    n_steps: int = 3
    lambda_sparse: float = 1e-3
    optimizer_params: Dict[str, Any] = field(default_factory=lambda: dict(lr=2e-2))
    verbose: int = 1

    def fit(self, X_train, y_train, eval_set, eval_name, eval_metric, max_epochs=3, patience=10,
            batch_size=128, virtual_batch_size=32, loss_fn=None):
        self.batch_size, self.virtual_batch_size = batch_size, virtual_batch_size
        self.loss_fn = loss_fn if loss_fn is not None else nn.functional.mse_loss
        self.input_dim = X_train.shape[1]
        self.output_dim = y_train.shape[1]
        train_loader, valid_loaders = self._construct_loaders(X_train, y_train, eval_set)
        self._set_network()
        self._set_optimizer()
        self.history = History()
        stopper = EarlyStopping(f"{eval_name[-1]}_{eval_metric[-1].__name__}", patience)
        for epoch_idx in range(max_epochs):
            logs = self._train_epoch(train_loader)
            for name, loader in zip(eval_name, valid_loaders):
                logs.update(self._predict_epoch(name, loader, eval_metric))
            self.history.on_epoch_end(epoch_idx, logs)
            stopper.on_epoch_end(epoch_idx, logs)
            if self.verbose:
                print(f"epoch {epoch_idx} | " + " | ".join(f"{k}: {v:.5f}" for k, v in logs.items()))
            if stopper.stop_training:
                break
        self.network.eval()

    def _construct_loaders(self, X_train, y_train, eval_set):
        to_ds = lambda X, y: TensorDataset(torch.from_numpy(X).float(), torch.from_numpy(y).float())
        train_loader = DataLoader(to_ds(X_train, y_train), batch_size=self.batch_size, shuffle=True, drop_last=True)
        valid_loaders = [DataLoader(to_ds(X, y), batch_size=self.batch_size) for X, y in eval_set]
        return train_loader, valid_loaders

    def _set_network(self):
        self.network = TabNetNoEmbeddings(self.input_dim, self.output_dim, n_d=self.n_d, n_a=self.n_a,
                                          n_steps=self.n_steps, virtual_batch_size=self.virtual_batch_size)

    def _set_optimizer(self):
        self._optimizer = torch.optim.Adam(self.network.parameters(), **self.optimizer_params)

    def _train_epoch(self, train_loader):
        self.network.train()
        losses = [self._train_batch(X, y) for X, y in train_loader]
        return {"loss": float(np.mean(losses))}

    def _train_batch(self, X, y):
        for param in self.network.parameters():
            param.grad = None
        output, M_loss = self.network(X)
        loss = self.compute_loss(output, y)
        # Add the overall sparsity loss
        loss -= self.lambda_sparse * M_loss

        # Perform backward pass and optimization
        loss.backward()  # raises
        nn.utils.clip_grad_norm_(self.network.parameters(), 1.0)
        self._optimizer.step()
        return loss.detach().item()

    def _predict_epoch(self, name, loader, metrics):
        self.network.eval()
        preds, targets = [], []
        with torch.no_grad():
            for X, y in loader:
                preds.append(self.network(X)[0].numpy())
                targets.append(y.numpy())
        y_pred, y_true = np.vstack(preds), np.vstack(targets)
        return {f"{name}_{m.__name__}": float(m(y_true, y_pred)) for m in metrics}


class TabNetRegressor(TabModel):
    def compute_loss(self, y_pred, y_true):
        return self.loss_fn(y_pred, y_true)


# ------------------------------------------------------------------ user notebook
def RMSPE(y_true, y_pred):
    return np.sqrt(np.mean(np.square((y_true - y_pred) / y_true)))


class RMSELoss(torch.nn.Module):
    def __init__(self):
        super(RMSELoss, self).__init__()

    def forward(self, x, y):
        criterion = nn.MSELoss()
        eps = 1e-6
        loss = torch.sqrt(criterion(x, y) + eps)
        return loss


if __name__ == "__main__":
    X = np.random.randn(640, 10).astype(np.float32)
    w = np.random.randn(10, 1).astype(np.float32)
    y = (np.abs(X @ w) * 0.1 + 1.0).astype(np.float32)
    X_train, y_train, X_valid, y_valid = X[:512], y[:512], X[512:], y[512:]

    clf = TabNetRegressor(n_d=8, n_a=8, n_steps=3, optimizer_params=dict(lr=2e-2))
    clf.fit(X_train=X_train, y_train=y_train,
            eval_set=[(X_train, y_train), (X_valid, y_valid)], eval_name=["train", "valid"],
            eval_metric=[RMSPE], max_epochs=3, patience=10,
            batch_size=128, virtual_batch_size=32, loss_fn=RMSELoss())
    print("best valid RMSPE:", min(clf.history.history["valid_RMSPE"]))
