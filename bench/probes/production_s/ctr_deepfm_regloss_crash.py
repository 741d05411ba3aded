# expect: freed_graph
# source: https://github.com/shenweichen/DeepCTR-Torch/issues/69
"""DeepFM click-through-rate model in the style of DeepCTR-Torch.

Feature columns are described with SparseFeat / DenseFeat tuples, the model
owns embedding tables for the FM / DNN parts and a wide Linear part, and a
Keras-like `compile` / `fit` / `evaluate` API drives training with callbacks.
L2 regularisation of the embedding tables is configured per parameter group.
Runs on synthetic Criteo-like data.
"""
import argparse
import time
from collections import OrderedDict, namedtuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data as Data
from torch.utils.data import DataLoader

SparseFeat = namedtuple("SparseFeat", ["name", "dimension", "embedding_name"])
DenseFeat = namedtuple("DenseFeat", ["name", "dimension"])


def build_input_features(feature_columns):
    features = OrderedDict()
    start = 0
    for feat in feature_columns:
        if feat.name in features:
            continue
        dim = 1 if isinstance(feat, SparseFeat) else feat.dimension
        features[feat.name] = (start, start + dim)
        start += dim
    return features


def create_embedding_matrix(feature_columns, embedding_size, init_std=1e-4):
    sparse = [f for f in feature_columns if isinstance(f, SparseFeat)]
    emb = nn.ModuleDict({f.embedding_name: nn.Embedding(f.dimension, embedding_size) for f in sparse})
    for t in emb.values():
        nn.init.normal_(t.weight, mean=0, std=init_std)
    return emb


def roc_auc(y_true, y_score):
    order = np.argsort(y_score)
    ranks = np.empty_like(order, dtype=np.float64)
    ranks[order] = np.arange(1, len(y_score) + 1)
    pos = y_true == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    if n_pos == 0 or n_neg == 0:
        return 0.5
    return (ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def log_loss(y_true, y_pred, eps=1e-7):
    y_pred = np.clip(y_pred, eps, 1 - eps)
    return float(-np.mean(y_true * np.log(y_pred) + (1 - y_true) * np.log(1 - y_pred)))


class History:
    def __init__(self):
        self.history = {}

    def on_epoch_end(self, epoch, logs):
        for k, v in logs.items():
            self.history.setdefault(k, []).append(v)


class EarlyStopping:
    def __init__(self, monitor="val_auc", patience=2):
        self.monitor, self.patience, self.best, self.wait = monitor, patience, -np.inf, 0
        self.model = None

    def on_epoch_end(self, epoch, logs):
        cur = logs.get(self.monitor)
        if cur is None:
            return
        if cur > self.best:
            self.best, self.wait = cur, 0
        else:
            self.wait += 1
            if self.wait >= self.patience:
                self.model.stop_training = True


class Linear(nn.Module):
    def __init__(self, feature_columns, feature_index, init_std=1e-4):
        super().__init__()
        self.feature_index = feature_index
        self.sparse_feature_columns = [f for f in feature_columns if isinstance(f, SparseFeat)]
        self.dense_feature_columns = [f for f in feature_columns if isinstance(f, DenseFeat)]
        self.embedding_dict = create_embedding_matrix(self.sparse_feature_columns, 1, init_std)
        dense_dim = sum(f.dimension for f in self.dense_feature_columns)
        self.weight = nn.Parameter(torch.empty(dense_dim, 1))
        nn.init.normal_(self.weight, mean=0, std=init_std)

    def forward(self, X):
        sparse = [self.embedding_dict[f.embedding_name](
            X[:, self.feature_index[f.name][0]:self.feature_index[f.name][1]].long())
            for f in self.sparse_feature_columns]
        dense = [X[:, self.feature_index[f.name][0]:self.feature_index[f.name][1]]
                 for f in self.dense_feature_columns]
        logit = torch.sum(torch.cat(sparse, dim=-1), dim=-1, keepdim=False)
        return logit + torch.cat(dense, dim=-1).matmul(self.weight)


class BaseModel(nn.Module):
    def __init__(self, linear_feature_columns, dnn_feature_columns, embedding_size=8,
                 l2_reg_linear=1e-5, l2_reg_embedding=1e-5, init_std=1e-4, seed=1024):
        super().__init__()
        torch.manual_seed(seed)
        self.reg_loss = torch.zeros((1,))
        self.feature_index = build_input_features(linear_feature_columns + dnn_feature_columns)
        self.dnn_feature_columns = dnn_feature_columns
        self.embedding_dict = create_embedding_matrix(dnn_feature_columns, embedding_size, init_std)
        self.linear_model = Linear(linear_feature_columns, self.feature_index)
        self.add_regularization_loss(self.embedding_dict.parameters(), l2_reg_embedding)
        self.add_regularization_loss(self.linear_model.parameters(), l2_reg_linear)
        self.stop_training = False
        self.history = History()

    def add_regularization_loss(self, weight_list, weight_decay, p=2):
        reg_loss = torch.zeros((1,))
        for w in weight_list:
            reg_loss = reg_loss + torch.norm(w, p=p)
        self.reg_loss += weight_decay * reg_loss

    def input_from_feature_columns(self, X):
        sparse = [self.embedding_dict[f.embedding_name](
            X[:, self.feature_index[f.name][0]:self.feature_index[f.name][1]].long())
            for f in self.dnn_feature_columns if isinstance(f, SparseFeat)]
        dense = [X[:, self.feature_index[f.name][0]:self.feature_index[f.name][1]]
                 for f in self.dnn_feature_columns if isinstance(f, DenseFeat)]
        return sparse, dense

    def compile(self, optimizer, loss=None, metrics=None):
        self.optim = self._get_optim(optimizer)
        self.loss_func = F.binary_cross_entropy if loss == "binary_crossentropy" else F.mse_loss
        self.metrics = {m: (roc_auc if m == "auc" else log_loss) for m in (metrics or [])}

    def _get_optim(self, optimizer):
        if optimizer == "adagrad":
            return torch.optim.Adagrad(self.parameters(), lr=0.01)
        if optimizer == "adam":
            return torch.optim.Adam(self.parameters(), lr=1e-3)
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def fit(self, x, y, batch_size=256, epochs=1, verbose=1, validation_split=0.0, callbacks=None):
        split_at = int(x.shape[0] * (1.0 - validation_split))
        x, val_x = x[:split_at], x[split_at:]
        y, val_y = y[:split_at], y[split_at:]
        train_loader = DataLoader(Data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)),
                                  shuffle=True, batch_size=batch_size)
        callbacks = (callbacks or []) + [self.history]
        for cb in callbacks:
            cb.model = self
        model = self.train()
        steps_per_epoch = (len(x) - 1) // batch_size + 1
        for epoch in range(epochs):
            start_time, total_loss_epoch, train_result = time.time(), 0.0, {}
            for x_train, y_train in train_loader:
                xb, yb = x_train.float(), y_train.float()
                y_pred = model(xb).squeeze()
                self.optim.zero_grad()
                loss = self.loss_func(y_pred, yb.squeeze(), reduction="sum")
                total_loss = loss + self.reg_loss
                total_loss_epoch += total_loss.item()
                total_loss.backward()  # raises
                self.optim.step()
                for name, fn in self.metrics.items():
                    train_result.setdefault(name, []).append(
                        fn(yb.numpy(), y_pred.data.numpy().astype("float64")))
            logs = {"loss": total_loss_epoch / len(x)}
            for name, res in train_result.items():
                logs[name] = float(np.sum(res) / steps_per_epoch)
            for name, res in self.evaluate(val_x, val_y, batch_size).items():
                logs["val_" + name] = res
            if verbose:
                print("Epoch {}/{} {}s - ".format(epoch + 1, epochs, int(time.time() - start_time))
                      + " - ".join("{}: {:.4f}".format(k, v) for k, v in logs.items()))
            for cb in callbacks:
                cb.on_epoch_end(epoch, logs)
            if self.stop_training:
                break
        return self.history

    def evaluate(self, x, y, batch_size=256):
        pred = self.predict(x, batch_size)
        return {name: fn(y, pred) for name, fn in self.metrics.items()}

    def predict(self, x, batch_size=256):
        model = self.eval()
        loader = DataLoader(Data.TensorDataset(torch.from_numpy(x)), shuffle=False, batch_size=batch_size)
        out = []
        with torch.no_grad():
            for (xb,) in loader:
                out.append(model(xb.float()).data.numpy())
        return np.concatenate(out).astype("float64").reshape(-1)


class DeepFM(BaseModel):
    def __init__(self, linear_feature_columns, dnn_feature_columns, embedding_size=8,
                 dnn_hidden_units=(64, 32), dnn_dropout=0.0, **kwargs):
        super().__init__(linear_feature_columns, dnn_feature_columns, embedding_size, **kwargs)
        n_sparse = sum(isinstance(f, SparseFeat) for f in dnn_feature_columns)
        n_dense = sum(f.dimension for f in dnn_feature_columns if isinstance(f, DenseFeat))
        dims = [n_sparse * embedding_size + n_dense] + list(dnn_hidden_units)
        layers = []
        for a, b in zip(dims[:-1], dims[1:]):
            layers += [nn.Linear(a, b), nn.ReLU(), nn.Dropout(dnn_dropout)]
        self.dnn = nn.Sequential(*layers)
        self.dnn_linear = nn.Linear(dims[-1], 1, bias=False)

    @staticmethod
    def fm(embeds):
        square_of_sum = torch.pow(torch.sum(embeds, dim=1, keepdim=True), 2)
        sum_of_square = torch.sum(embeds * embeds, dim=1, keepdim=True)
        return 0.5 * torch.sum(square_of_sum - sum_of_square, dim=2, keepdim=False).squeeze(1)

    def forward(self, X):
        sparse, dense = self.input_from_feature_columns(X)
        logit = self.linear_model(X)
        logit = logit + self.fm(torch.cat(sparse, dim=1)).unsqueeze(-1)
        dnn_input = torch.cat([torch.flatten(torch.cat(sparse, dim=-1), start_dim=1)] + dense, dim=-1)
        logit = logit + self.dnn_linear(self.dnn(dnn_input))
        return torch.sigmoid(logit)


def make_criteo_like(n=1024, n_sparse=6, n_dense=4, vocab=50, seed=0):
    rng = np.random.RandomState(seed)
    sparse = rng.randint(0, vocab, size=(n, n_sparse)).astype(np.float32)
    dense = rng.rand(n, n_dense).astype(np.float32)
    logits = 0.3 * (sparse[:, 0] % 3 - 1) + dense[:, 0] - 0.5
    y = (rng.rand(n) < 1 / (1 + np.exp(-logits))).astype(np.float32)
    return np.concatenate([sparse, dense], axis=1), y


def main():
    args = argparse.Namespace(batch_size=128, epochs=2, embedding_size=4, vocab=50,
                              n_sparse=6, n_dense=4, optimizer="adagrad", l2_reg_embedding=1e-5)
    x, y = make_criteo_like(vocab=args.vocab, n_sparse=args.n_sparse, n_dense=args.n_dense)
    sparse_cols = [SparseFeat("C%d" % i, args.vocab, "C%d" % i) for i in range(args.n_sparse)]
    dense_cols = [DenseFeat("I%d" % i, 1) for i in range(args.n_dense)]
    cols = sparse_cols + dense_cols
    model = DeepFM(cols, cols, embedding_size=args.embedding_size,
                   l2_reg_embedding=args.l2_reg_embedding)
    model.compile(args.optimizer, "binary_crossentropy", metrics=["binary_crossentropy", "auc"])
    history = model.fit(x, y, batch_size=args.batch_size, epochs=args.epochs, verbose=1,
                        validation_split=0.2, callbacks=[EarlyStopping(patience=2)])
    print("final val_auc", history.history["val_auc"][-1])


if __name__ == "__main__":
    main()
