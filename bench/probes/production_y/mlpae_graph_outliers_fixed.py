# expect: clean
# source: https://github.com/pygod-team/pygod/issues/10
"""Node-level outlier detection on an attributed graph with an MLP autoencoder,
following PyGOD's early MLPAE detector (PyOD-style BaseDetector API: fit,
decision_function, predict, predict_proba). Attribute outliers are injected into
a synthetic stochastic-block-model graph; nodes are scored by reconstruction error.
"""
import argparse
import random
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def roc_auc(labels, scores):
    labels, scores = np.asarray(labels), np.asarray(scores)
    order = np.argsort(scores)
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    n_pos, n_neg = labels.sum(), len(labels) - labels.sum()
    return (ranks[labels == 1].sum() - n_pos * (n_pos + 1) / 2) / max(n_pos * n_neg, 1)


class BaseDetector:
    def __init__(self, contamination=0.1):
        if not 0.0 < contamination <= 0.5:
            raise ValueError("contamination must be in (0, 0.5]")
        self.contamination = contamination

    def _process_decision_scores(self):
        self.threshold_ = np.percentile(self.decision_scores_, 100 * (1 - self.contamination))
        self.labels_ = (self.decision_scores_ > self.threshold_).astype("int").ravel()
        self._mu = np.mean(self.decision_scores_)
        self._sigma = np.std(self.decision_scores_)
        return self

    def predict(self, G, args, return_confidence=False):
        scores = self.decision_function(G, args)
        pred = (scores > self.threshold_).astype("int").ravel()
        if return_confidence:
            return pred, self.predict_confidence(scores)
        return pred

    def predict_proba(self, G, args):
        scores = self.decision_function(G, args)
        probs = np.zeros([len(scores), 2])
        lo, hi = self.decision_scores_.min(), self.decision_scores_.max()
        probs[:, 1] = ((scores - lo) / (hi - lo + 1e-12)).clip(0, 1)
        probs[:, 0] = 1 - probs[:, 1]
        return probs

    def predict_confidence(self, scores):
        n = len(self.decision_scores_)
        count = (self.decision_scores_[None, :] <= scores[:, None]).sum(1)
        return np.abs(2 * (count + 1) / (n + 2) - 1)


class EarlyStopping:
    def __init__(self, patience=10):
        self.patience, self.best, self.counter, self.state = patience, -np.inf, 0, None

    def step(self, score, model):
        if score > self.best:
            self.best, self.counter = score, 0
            self.state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        else:
            self.counter += 1
        return self.counter >= self.patience


class MLP(nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels, num_layers, dropout, act):
        super().__init__()
        dims = [in_channels] + [hidden_channels] * (num_layers - 1) + [out_channels]
        self.lins = nn.ModuleList([nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:])])
        self.dropout, self.act = dropout, act

    def forward(self, x):
        for i, lin in enumerate(self.lins):
            x = lin(x)
            if i < len(self.lins) - 1:
                x = F.relu(x) if self.act else x
                x = F.dropout(x, self.dropout, training=self.training)
        return x


class MLPAE(BaseDetector):
    def __init__(self, contamination=0.1):
        super().__init__(contamination=contamination)

    def process_graph(self, G, args):
        return G.x, G.y

    def fit(self, G, args):
        x, labels = self.process_graph(G, args)
        self.device = torch.device("cpu")
        self.model = nn.Sequential(
            MLP(x.shape[1], args.hidden_size, args.hidden_size, args.num_layers, args.dropout, args.act),
            MLP(args.hidden_size, args.hidden_size, x.shape[1], args.num_layers, args.dropout, args.act),
        ).to(self.device)
        optimizer = torch.optim.Adam(self.model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
        es = EarlyStopping(args.patience) if args.patience > 0 else None
        self.model.train()
        for epoch in range(args.epoch):
            x_ = self.model(x)
            loss = F.mse_loss(x_, x)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            score = torch.mean(F.mse_loss(x_, x, reduction="none"), dim=1).detach().cpu().numpy()
            if args.verbose:
                auc = roc_auc(labels.numpy(), score)
                print("Epoch {:04d}: Loss {:.4f} | AUC {:.4f}".format(epoch, loss.item(), auc))
            if es is not None and es.step(-loss.item(), self.model):
                break
        if es is not None:
            self.model.load_state_dict(es.state)
        self.decision_scores_ = score
        self._process_decision_scores()
        return self

    def decision_function(self, G, args):
        self.model.eval()
        x, _ = self.process_graph(G, args)
        x_ = self.model(x)
        return torch.mean(F.mse_loss(x_, x, reduction="none"), dim=1).detach().cpu().numpy()


def gen_attribute_outliers(x, n, k, gen):
    idx = torch.randperm(x.shape[0], generator=gen)[:n]
    y = torch.zeros(x.shape[0], dtype=torch.long)
    for i in idx.tolist():
        cand = torch.randint(0, x.shape[0], (k,), generator=gen)
        far = cand[torch.argmax(((x[cand] - x[i]) ** 2).sum(1))]
        x[i] = x[far] * 3.0
        y[i] = 1
    return x, y


def make_graph(seed, n_nodes=200, n_feat=16, n_blocks=4):
    gen = torch.Generator().manual_seed(seed)
    block = torch.randint(0, n_blocks, (n_nodes,), generator=gen)
    centers = torch.randn(n_blocks, n_feat, generator=gen)
    x = centers[block] + 0.3 * torch.randn(n_nodes, n_feat, generator=gen)
    same = block[:, None] == block[None, :]
    prob = torch.where(same, torch.tensor(0.1), torch.tensor(0.005))
    adj = torch.rand(n_nodes, n_nodes, generator=gen) < prob
    x, y = gen_attribute_outliers(x, 10, 30, gen)
    return SimpleNamespace(x=x, y=y, edge_index=adj.nonzero().t())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--hidden_size", type=int, default=16)
    parser.add_argument("--num_layers", type=int, default=2)
    parser.add_argument("--epoch", type=int, default=60)
    parser.add_argument("--lr", type=float, default=4e-3)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--weight_decay", type=float, default=1e-3)
    parser.add_argument("--act", type=bool, default=True)
    parser.add_argument("--verbose", type=bool, default=False)
    parser.add_argument("--patience", type=int, default=0)
    args = parser.parse_args([])
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    data = make_graph(seed=0)
    clf = MLPAE(contamination=0.05)
    clf.fit(data, args)
    print("train AUC:", round(roc_auc(data.y.numpy(), clf.decision_scores_), 4))
    labels, confidence = clf.predict(data, args, return_confidence=True)
    print("flagged nodes:", int(labels.sum()), "mean confidence:", round(float(confidence.mean()), 3))
    print("proba[:3]:", np.round(clf.predict_proba(data, args)[:3], 3).tolist())


if __name__ == "__main__":
    main()
