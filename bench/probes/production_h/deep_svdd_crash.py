# expect: freed_graph
# source: https://github.com/yzhao062/pyod/issues/606
"""Deep one-class classification (Deep SVDD) outlier detector with an
sklearn-style fit / decision_function API, evaluated on synthetic
multi-modal inliers with uniformly scattered outliers."""
import copy
import time

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
np.random.seed(0)

optimizer_dict = {"sgd": optim.SGD, "adam": optim.Adam, "rmsprop": optim.RMSprop, "adamw": optim.AdamW}
activation_dict = {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid, "leaky_relu": nn.LeakyReLU}


class StandardScaler:
    def fit_transform(self, X):
        self.mean_, self.scale_ = X.mean(0), X.std(0) + 1e-8
        return self.transform(X)

    def transform(self, X):
        return (X - self.mean_) / self.scale_


def roc_auc(y, s):
    order = np.argsort(s)
    ranks = np.empty(len(s))
    ranks[order] = np.arange(1, len(s) + 1)
    pos = y == 1
    return (ranks[pos].sum() - pos.sum() * (pos.sum() + 1) / 2) / (pos.sum() * (~pos).sum())


class InnerDeepSVDD(nn.Module):
    def __init__(self, n_features, use_ae, hidden_neurons, hidden_activation, output_activation, dropout_rate):
        super().__init__()
        self.n_features = n_features
        self.use_ae = use_ae
        self.hidden_neurons = hidden_neurons or [64, 32]
        self.hidden_activation = hidden_activation
        self.output_activation = output_activation
        self.dropout_rate = dropout_rate
        self.model = self._build_model()
        self.c = None

    def _init_c(self, X_norm, eps=0.1):
        intermediate_output = {}
        hook_handle = self.model._modules.get("net_output").register_forward_hook(
            lambda module, input, output: intermediate_output.update({"net_output": output}))
        self.model.eval()
        with torch.no_grad():
            _ = self.model(X_norm)
        out = intermediate_output["net_output"]
        hook_handle.remove()
        self.c = torch.mean(out, dim=0)
        self.c[(torch.abs(self.c) < eps) & (self.c < 0)] = -eps
        self.c[(torch.abs(self.c) < eps) & (self.c > 0)] = eps

    def _build_model(self):
        layers = nn.Sequential()
        layers.add_module("input_layer", nn.Linear(self.n_features, self.hidden_neurons[0], bias=False))
        layers.add_module("hidden_activation_e0", activation_dict[self.hidden_activation]())
        for i in range(1, len(self.hidden_neurons) - 1):
            layers.add_module(f"hidden_layer_e{i}", nn.Linear(self.hidden_neurons[i - 1], self.hidden_neurons[i],
                                                              bias=False))
            layers.add_module(f"hidden_activation_e{i}", activation_dict[self.hidden_activation]())
            layers.add_module(f"hidden_dropout_e{i}", nn.Dropout(self.dropout_rate))
        layers.add_module("net_output", nn.Linear(self.hidden_neurons[-2], self.hidden_neurons[-1], bias=False))
        layers.add_module(f"hidden_activation_e{len(self.hidden_neurons)}",
                          activation_dict[self.hidden_activation]())
        if self.use_ae:
            for j in range(len(self.hidden_neurons) - 1, 0, -1):
                layers.add_module(f"hidden_layer_d{j}", nn.Linear(self.hidden_neurons[j], self.hidden_neurons[j - 1],
                                                                  bias=False))
                layers.add_module(f"hidden_activation_d{j}", activation_dict[self.hidden_activation]())
                layers.add_module(f"hidden_dropout_d{j}", nn.Dropout(self.dropout_rate))
            layers.add_module("output_layer", nn.Linear(self.hidden_neurons[0], self.n_features, bias=False))
            layers.add_module("output_activation", activation_dict[self.output_activation]())
        return layers

    def forward(self, x):
        return self.model(x)


class DeepSVDD:
    def __init__(self, n_features, c=None, use_ae=False, hidden_neurons=None, hidden_activation="relu",
                 output_activation="sigmoid", optimizer="adam", epochs=5, batch_size=64, dropout_rate=0.2,
                 l2_regularizer=0.1, preprocessing=True, contamination=0.1, verbose=1, random_state=0):
        self.n_features, self.c, self.use_ae = n_features, c, use_ae
        self.hidden_neurons = hidden_neurons or [64, 32]
        self.hidden_activation, self.output_activation = hidden_activation, output_activation
        self.optimizer, self.epochs, self.batch_size = optimizer, epochs, batch_size
        self.dropout_rate, self.l2_regularizer = dropout_rate, l2_regularizer
        self.preprocessing, self.contamination, self.verbose = preprocessing, contamination, verbose
        torch.manual_seed(random_state)

    def fit(self, X, y=None):
        if self.preprocessing:
            self.scaler_ = StandardScaler()
            X_norm = self.scaler_.fit_transform(X)
        else:
            X_norm = np.copy(X)
        np.random.shuffle(X_norm)
        self.model_ = InnerDeepSVDD(self.n_features, use_ae=self.use_ae, hidden_neurons=self.hidden_neurons,
                                    hidden_activation=self.hidden_activation,
                                    output_activation=self.output_activation, dropout_rate=self.dropout_rate)
        X_norm = torch.tensor(X_norm, dtype=torch.float32)
        if self.c is None:
            self.model_._init_c(X_norm)
            self.c = self.model_.c
        X_norm = torch.tensor(self.scaler_.transform(X) if self.preprocessing else X, dtype=torch.float32)
        dataloader = DataLoader(TensorDataset(X_norm, X_norm), batch_size=self.batch_size, shuffle=True)
        best_loss, best_model_dict = float("inf"), None
        optimizer = optimizer_dict[self.optimizer](self.model_.parameters(), weight_decay=self.l2_regularizer)
        scheduler = optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
        w_d = 1e-6 * sum([torch.linalg.norm(w) for w in self.model_.parameters()])
        for epoch in range(self.epochs):
            self.model_.train()
            epoch_loss = 0
            for batch_x, _ in dataloader:
                optimizer.zero_grad()
                outputs = self.model_(batch_x)
                dist = torch.sum((outputs - self.c) ** 2, dim=-1)
                if self.use_ae:
                    loss = torch.mean(dist) + w_d + torch.mean(torch.square(outputs - batch_x))
                else:
                    loss = torch.mean(dist) + w_d
                loss.backward()  # raises
                optimizer.step()
                epoch_loss += loss.item()
            scheduler.step()
            if epoch_loss < best_loss:
                best_loss = epoch_loss
                best_model_dict = copy.deepcopy(self.model_.state_dict())
            if self.verbose:
                print(f"Epoch {epoch + 1}/{self.epochs}, Loss: {epoch_loss:.4f}")
        self.model_.load_state_dict(best_model_dict)
        self.decision_scores_ = self.decision_function(X)
        self.threshold_ = np.percentile(self.decision_scores_, 100 * (1 - self.contamination))
        return self

    def decision_function(self, X):
        X_norm = self.scaler_.transform(X) if self.preprocessing else np.copy(X)
        X_norm = torch.tensor(X_norm, dtype=torch.float32)
        self.model_.eval()
        with torch.no_grad():
            outputs = self.model_(X_norm)
            dist = torch.sum((outputs - self.c) ** 2, dim=-1)
        if self.use_ae:
            dist = dist + torch.mean(torch.square(outputs - X_norm), dim=-1)
        return dist.numpy()

    def predict(self, X):
        return (self.decision_function(X) > self.threshold_).astype(int)


def generate_data(n_train=600, n_test=300, n_features=10, contamination=0.1, seed=0):
    rng = np.random.default_rng(seed)

    def draw(n):
        n_out = int(n * contamination)
        centers = rng.normal(0, 2, size=(3, n_features))
        inl = centers[rng.integers(0, 3, n - n_out)] + rng.normal(0, 0.5, size=(n - n_out, n_features))
        out = rng.uniform(-6, 6, size=(n_out, n_features))
        return np.vstack([inl, out]).astype(np.float32), np.r_[np.zeros(n - n_out), np.ones(n_out)]

    return draw(n_train) + draw(n_test)


def main():
    t0 = time.time()
    X_train, y_train, X_test, y_test = generate_data()
    for opt_name in ("adam", "rmsprop"):
        clf = DeepSVDD(n_features=X_train.shape[1], optimizer=opt_name, epochs=4, hidden_neurons=[64, 32],
                       contamination=0.1, verbose=1)
        clf.fit(X_train)
        auc_tr = roc_auc(y_train, clf.decision_scores_)
        auc_te = roc_auc(y_test, clf.decision_function(X_test))
        print(f"optimizer={opt_name} train AUC {auc_tr:.3f} test AUC {auc_te:.3f} "
              f"flagged {clf.predict(X_test).mean():.3f} ({time.time() - t0:.1f}s)")


if __name__ == "__main__":
    main()
