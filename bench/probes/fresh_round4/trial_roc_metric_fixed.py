# expect: clean
# source: https://github.com/pytorchbearer/torchbearer/issues/424
import math
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(3)
np.random.seed(3)

MODEL, Y_PRED, Y_TRUE, EPOCH, METRICS, LOSS = "model", "y_pred", "y_true", "epoch", "metrics", "loss"


def binary_auc(scores, labels):
    order = np.argsort(-scores, kind="mergesort")
    labels = labels[order]
    pos = labels.sum()
    neg = len(labels) - pos
    if pos == 0 or neg == 0:
        return float("nan")
    tps = np.cumsum(labels)
    fps = np.cumsum(1 - labels)
    tpr = np.concatenate([[0.0], tps / pos])
    fpr = np.concatenate([[0.0], fps / neg])
    return float(np.sum((fpr[1:] - fpr[:-1]) * (tpr[1:] + tpr[:-1]) / 2.0))


def macro_roc_auc(y_onehot, y_score):
    aucs = [binary_auc(y_score[:, k], y_onehot[:, k]) for k in range(y_onehot.shape[1])]
    aucs = [a for a in aucs if not math.isnan(a)]
    return float(np.mean(aucs))


class Metric:
    def __init__(self, name):
        self.name = name

    def reset(self, state):
        pass

    def process(self, state):
        return None

    def process_final(self, state):
        return None


class Mean(Metric):
    def __init__(self, name, key):
        super().__init__(name)
        self.key = key

    def reset(self, state):
        self._sum, self._count = 0.0, 0

    def process(self, state):
        self._sum += float(state[self.key])
        self._count += 1

    def process_final(self, state):
        return self._sum / max(self._count, 1)


class EpochLambda(Metric):
    def __init__(self, name, metric_function):
        super().__init__(name)
        self._metric_function = metric_function

    def reset(self, state):
        self._y_pred = None
        self._y_true = None

    def process(self, state):
        y_pred, y_true = state[Y_PRED], state[Y_TRUE]
        self._y_pred = y_pred if self._y_pred is None else torch.cat((self._y_pred, y_pred), dim=0)
        self._y_true = y_true if self._y_true is None else torch.cat((self._y_true, y_true), dim=0)

    def process_final(self, state):
        return self._metric_function(self._y_pred, self._y_true)


class RocAucScore(EpochLambda):
    def __init__(self, one_hot_labels=True, one_hot_offset=0, one_hot_classes=3):
        def to_categorical(y):
            return np.eye(one_hot_classes, dtype="uint8")[y - one_hot_offset]

        process = to_categorical if one_hot_labels else (lambda y: y)
        super().__init__("roc_auc_score", lambda y_pred, y_true: macro_roc_auc(process(y_true.cpu().numpy()), y_pred.cpu().detach().numpy()))


class MetricList:
    def __init__(self, metrics):
        self.metrics = metrics

    def reset(self, state):
        for m in self.metrics:
            m.reset(state)

    def process(self, state):
        for m in self.metrics:
            m.process(state)

    def process_final(self, state):
        return OrderedDict((m.name, m.process_final(state)) for m in self.metrics)


class Classifier(nn.Module):
    def __init__(self, n_in=6, n_hidden=16, n_classes=3):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(n_in, n_hidden), nn.ReLU(), nn.Linear(n_hidden, n_hidden), nn.ReLU())
        self.head = nn.Linear(n_hidden, n_classes)

    def forward(self, x):
        return F.softmax(self.head(self.body(x)), dim=1)


def make_loader(n=240, batch_size=40, n_classes=3):
    centers = torch.randn(n_classes, 6) * 2.0
    labels = torch.randint(0, n_classes, (n,))
    feats = centers[labels] + torch.randn(n, 6)
    return [(feats[i:i + batch_size], labels[i:i + batch_size]) for i in range(0, n, batch_size)]


class Trial:
    def __init__(self, model, optimizer, criterion, metrics):
        self.state = {MODEL: model, METRICS: {}}
        self.optimizer = optimizer
        self.criterion = criterion
        self.metric_list = MetricList(metrics)
        self.history = []

    def _train_epoch(self, loader, epoch):
        state = self.state
        state[EPOCH] = epoch
        state[MODEL].train()
        self.metric_list.reset(state)
        for x, y in loader:
            self.optimizer.zero_grad()
            state[Y_PRED] = state[MODEL](x)
            state[Y_TRUE] = y
            state[LOSS] = self.criterion(state[Y_PRED], y)
            state[LOSS].backward()
            self.optimizer.step()
            self.metric_list.process(state)
        state[METRICS] = self.metric_list.process_final(state)
        return dict(state[METRICS])

    def run(self, loader, epochs=3):
        for epoch in range(epochs):
            metrics = self._train_epoch(loader, epoch)
            self.history.append(metrics)
            print(epoch, {k: round(v, 4) for k, v in metrics.items()})
        return self.history


def nll_on_probs(probs, target):
    return F.nll_loss(torch.log(probs + 1e-8), target)


if __name__ == "__main__":
    loader = make_loader()
    model = Classifier()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    trial = Trial(model, optimizer, nll_on_probs, [Mean("running_loss", LOSS), RocAucScore(one_hot_classes=3)])
    history = trial.run(loader, epochs=3)
    print("final auc:", history[-1]["roc_auc_score"])
