# expect: inplace_version
# source: https://github.com/shenweichen/DeepCTR-Torch/issues/88
"""DeepFM click-through-rate model in the DeepCTR-Torch 0.2.x layout.

Feature columns (SparseFeat / DenseFeat), a BaseModel that owns the embedding
dictionary, the linear (wide) part and the L2 regularisation of embeddings / linear /
DNN weights, DeepFM = linear + FM + DNN, and a Keras-like `fit` / `evaluate` /
`predict` with callbacks (history, early stopping).  Synthetic Criteo-like logs with
13 dense and 6 sparse fields, CPU only.
"""
import random
import time
from collections import OrderedDict, namedtuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class SparseFeat(namedtuple('SparseFeat', ['name', 'vocabulary_size', 'embedding_dim'])):
    __slots__ = ()


class DenseFeat(namedtuple('DenseFeat', ['name', 'dimension'])):
    __slots__ = ()


def set_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def build_input_features(feature_columns):
    features, start = OrderedDict(), 0
    for feat in feature_columns:
        if feat.name in features:
            continue
        width = 1 if isinstance(feat, SparseFeat) else feat.dimension
        features[feat.name] = (start, start + width)
        start += width
    return features


def roc_auc(y_true, y_score):
    order = np.argsort(y_score)
    ranks = np.empty(len(y_score))
    ranks[order] = np.arange(1, len(y_score) + 1)
    pos = y_true == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    if n_pos == 0 or n_neg == 0:
        return 0.5
    return (ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


# ------------------------------------------------------------------------- layers
class Linear(nn.Module):
    def __init__(self, feature_columns, feature_index, init_std=1e-4):
        super().__init__()
        self.feature_index = feature_index
        self.sparse = [f for f in feature_columns if isinstance(f, SparseFeat)]
        self.dense = [f for f in feature_columns if isinstance(f, DenseFeat)]
        self.embedding_dict = nn.ModuleDict({f.name: nn.Embedding(f.vocabulary_size, 1) for f in self.sparse})
        for emb in self.embedding_dict.values():
            nn.init.normal_(emb.weight, 0, init_std)
        self.weight = nn.Parameter(torch.Tensor(sum(f.dimension for f in self.dense), 1))
        nn.init.normal_(self.weight, 0, init_std)

    def forward(self, X):
        sparse = [self.embedding_dict[f.name](X[:, slice(*self.feature_index[f.name])].long()) for f in self.sparse]
        dense = [X[:, slice(*self.feature_index[f.name])] for f in self.dense]
        logit = torch.cat(sparse, dim=-1).sum(dim=-1)
        return logit + torch.cat(dense, dim=-1).matmul(self.weight)


class FM(nn.Module):
    def forward(self, inputs):
        square_of_sum = torch.pow(torch.sum(inputs, dim=1, keepdim=True), 2)
        sum_of_square = torch.sum(inputs * inputs, dim=1, keepdim=True)
        return 0.5 * torch.sum(square_of_sum - sum_of_square, dim=2)


class DNN(nn.Module):
    def __init__(self, inputs_dim, hidden_units, dropout_rate=0.0, use_bn=False):
        super().__init__()
        dims = [inputs_dim] + list(hidden_units)
        self.linears = nn.ModuleList([nn.Linear(dims[i], dims[i + 1]) for i in range(len(hidden_units))])
        self.bn = nn.ModuleList([nn.BatchNorm1d(d) for d in hidden_units]) if use_bn else None
        self.dropout = nn.Dropout(dropout_rate)

    def forward(self, x):
        for i, fc in enumerate(self.linears):
            x = fc(x)
            if self.bn is not None:
                x = self.bn[i](x)
            x = self.dropout(F.relu(x))
        return x


# -------------------------------------------------------------------------- model
class BaseModel(nn.Module):
    def __init__(self, linear_feature_columns, dnn_feature_columns, l2_reg_linear=1e-5,
                 l2_reg_embedding=1e-5, init_std=1e-4, seed=1024, device='cpu'):
        super().__init__()
        torch.manual_seed(seed)
        self.device = device
        self.dnn_feature_columns = dnn_feature_columns
        self.feature_index = build_input_features(linear_feature_columns + dnn_feature_columns)
        self.embedding_dict = nn.ModuleDict({f.name: nn.Embedding(f.vocabulary_size, f.embedding_dim)
                                             for f in dnn_feature_columns if isinstance(f, SparseFeat)})
        for emb in self.embedding_dict.values():
            nn.init.normal_(emb.weight, 0, init_std)
        self.linear_model = Linear(linear_feature_columns, self.feature_index)
        self.reg_loss = torch.zeros((1,), device=device)
        self.aux_loss = torch.zeros((1,), device=device)
        self.add_regularization_loss(self.embedding_dict.parameters(), l2_reg_embedding)
        self.add_regularization_loss(self.linear_model.parameters(), l2_reg_linear)
        self.out = nn.Sigmoid()

    def add_regularization_loss(self, weight_list, weight_decay, p=2):
        reg_loss = torch.zeros((1,), device=self.device)
        for w in weight_list:
            l2_reg = torch.norm(w[1] if isinstance(w, tuple) else w, p=p)
            reg_loss = reg_loss + l2_reg
        self.reg_loss = self.reg_loss + weight_decay * reg_loss

    def input_from_feature_columns(self, X):
        sparse = [self.embedding_dict[f.name](X[:, slice(*self.feature_index[f.name])].long())
                  for f in self.dnn_feature_columns if isinstance(f, SparseFeat)]
        dense = [X[:, slice(*self.feature_index[f.name])]
                 for f in self.dnn_feature_columns if isinstance(f, DenseFeat)]
        return sparse, dense

    def compile(self, optimizer='adam', loss='binary_crossentropy', lr=1e-3):
        self.optim = {'adam': torch.optim.Adam, 'adagrad': torch.optim.Adagrad}[optimizer](self.parameters(), lr=lr)
        self.loss_func = F.binary_cross_entropy

    def fit(self, x, y, batch_size=64, epochs=1, validation_data=None, callbacks=()):
        loader = DataLoader(TensorDataset(torch.from_numpy(x), torch.from_numpy(y)), shuffle=True,
                            batch_size=batch_size)
        history = {'loss': [], 'val_auc': []}
        for epoch in range(epochs):
            self.train()
            start, loss_epoch, total_loss_epoch = time.time(), 0.0, 0.0
            for x_train, y_train in loader:
                x_b, y_b = x_train.to(self.device).float(), y_train.to(self.device).float()
                y_pred = self(x_b).squeeze()
                self.optim.zero_grad()
                loss = self.loss_func(y_pred, y_b.squeeze(), reduction='sum')
                total_loss = loss + self.reg_loss + self.aux_loss
                loss_epoch += loss.item()
                total_loss_epoch += total_loss.item()
                total_loss.backward(retain_graph=True)  # raises
                self.optim.step()
            history['loss'].append(total_loss_epoch / len(loader.dataset))
            if validation_data is not None:
                history['val_auc'].append(self.evaluate(*validation_data, batch_size))
            for cb in callbacks:
                cb(epoch, history, time.time() - start)
        return history

    def predict(self, x, batch_size=256):
        self.eval()
        preds = []
        with torch.no_grad():
            for (x_b,) in DataLoader(TensorDataset(torch.from_numpy(x)), batch_size=batch_size):
                preds.append(self(x_b.float()).cpu().numpy())
        return np.concatenate(preds).astype('float64').ravel()

    def evaluate(self, x, y, batch_size=256):
        return roc_auc(y.ravel(), self.predict(x, batch_size))


class DeepFM(BaseModel):
    def __init__(self, linear_feature_columns, dnn_feature_columns, use_fm=True, dnn_hidden_units=(64, 32),
                 l2_reg_dnn=0.0, dnn_dropout=0.0, **kwargs):
        super().__init__(linear_feature_columns, dnn_feature_columns, **kwargs)
        self.use_fm = use_fm
        self.fm = FM() if use_fm else None
        n_sparse = sum(isinstance(f, SparseFeat) for f in dnn_feature_columns)
        emb_dim = [f for f in dnn_feature_columns if isinstance(f, SparseFeat)][0].embedding_dim
        dense_dim = sum(f.dimension for f in dnn_feature_columns if isinstance(f, DenseFeat))
        self.dnn = DNN(n_sparse * emb_dim + dense_dim, dnn_hidden_units, dropout_rate=dnn_dropout)
        self.dnn_linear = nn.Linear(dnn_hidden_units[-1], 1, bias=False)
        self.add_regularization_loss(filter(lambda x: 'weight' in x[0] and 'bn' not in x[0],
                                            self.dnn.named_parameters()), l2_reg_dnn)
        self.add_regularization_loss(self.dnn_linear.parameters(), l2_reg_dnn)

    def forward(self, X):
        sparse_embedding_list, dense_value_list = self.input_from_feature_columns(X)
        logit = self.linear_model(X)
        if self.use_fm:
            logit = logit + self.fm(torch.cat(sparse_embedding_list, dim=1))
        dnn_input = torch.cat([torch.cat(sparse_embedding_list, dim=-1).flatten(1)] + dense_value_list, dim=-1)
        logit = logit + self.dnn_linear(self.dnn(dnn_input))
        return self.out(logit)


# ---------------------------------------------------------------------- synthetic
def make_criteo_like(n, n_dense, vocab_sizes, rng):
    dense = rng.random((n, n_dense)).astype(np.float32)
    sparse = np.stack([rng.integers(0, v, n) for v in vocab_sizes], axis=1).astype(np.float32)
    score = dense[:, 0] * 2 - dense[:, 1] + (sparse[:, 0] % 3 == 0) - 0.5
    y = (rng.random(n) < 1 / (1 + np.exp(-score))).astype(np.float32)
    return np.concatenate([sparse, dense], axis=1), y


def print_epoch(epoch, history, secs):
    auc = history['val_auc'][-1] if history['val_auc'] else float('nan')
    print(f"Epoch {epoch + 1} - {secs:.1f}s - loss: {history['loss'][-1]:.4f} - val_auc: {auc:.4f}")


def main():
    set_seed(2020)
    rng = np.random.default_rng(2020)
    vocab_sizes = [50, 30, 20, 10, 8, 6]
    n_dense = 13
    sparse_features = [SparseFeat(f'C{i + 1}', v, 4) for i, v in enumerate(vocab_sizes)]
    dense_features = [DenseFeat(f'I{i + 1}', 1) for i in range(n_dense)]
    fixlen_feature_columns = sparse_features + dense_features
    x, y = make_criteo_like(512, n_dense, vocab_sizes, rng)
    split = 384
    model = DeepFM(fixlen_feature_columns, fixlen_feature_columns, dnn_hidden_units=(32, 16), l2_reg_dnn=1e-5)
    model.compile('adam', 'binary_crossentropy', lr=1e-3)
    model.fit(x[:split], y[:split], batch_size=64, epochs=2, validation_data=(x[split:], y[split:]),
              callbacks=[print_epoch])


if __name__ == '__main__':
    main()
