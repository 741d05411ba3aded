# expect: clean
# source: https://github.com/LYuhang/GNN_Review/issues/3
"""Original linear GNN (Scarselli et al., "The graph neural network model") for
semi-supervised node classification on a small 18-node, 3-community graph.

Each node state is updated T times through the transition function Hw
(Xi produces an s*s matrix per edge, Rou a bias per node); the final states are
concatenated with the node embeddings and classified by a linear layer.
Training is done with Adam + StepLR, a Trainer class and a few callbacks.
"""
import random
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn as nn


@dataclass
class GNNConfig:
    feat_dim: int = 2
    stat_dim: int = 2
    T: int = 5
    mu: float = 0.9
    lr: float = 0.01
    weight_decay: float = 0.01
    epochs: int = 30
    lr_step: int = 10
    lr_gamma: float = 0.5
    seed: int = 0
    log_every: int = 5
    train_nodes: list = field(default_factory=lambda: [0, 1, 2, 6, 7, 8, 12, 13, 14])
    test_nodes: list = field(default_factory=lambda: [3, 4, 5, 9, 10, 11, 15, 16, 17])


# (node, label) set and edge set of the toy graph
NODES = [("n{}".format(i), 0) for i in range(1, 7)] + \
        [("n{}".format(i), 1) for i in range(7, 13)] + \
        [("n{}".format(i), 2) for i in range(13, 19)]
EDGES = [("n1", "n2"), ("n1", "n3"), ("n1", "n5"), ("n2", "n4"), ("n3", "n6"), ("n3", "n9"),
         ("n4", "n5"), ("n4", "n6"), ("n4", "n8"), ("n5", "n14"), ("n7", "n8"), ("n7", "n9"),
         ("n7", "n11"), ("n8", "n10"), ("n8", "n11"), ("n8", "n12"), ("n9", "n10"), ("n9", "n14"),
         ("n10", "n12"), ("n11", "n18"), ("n13", "n15"), ("n13", "n16"), ("n13", "n18"),
         ("n14", "n16"), ("n14", "n18"), ("n15", "n16"), ("n15", "n18"), ("n17", "n18")]


def seed_everything(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def build_edge_index(node_list, edge_list):
    """Return (node_inds, node_neis, dg_list): one entry per (node, neighbour) pair."""
    node_dict = {node: ind for ind, node in enumerate(node_list)}
    degree = {}
    for n1, n2 in edge_list:
        degree.setdefault(n1, set()).add(n2)
        degree.setdefault(n2, set()).add(n1)
    node_inds, node_neis = [], []
    for n in node_list:
        neis = sorted(degree[n], key=lambda x: node_dict[x])
        node_inds += [node_dict[n]] * len(neis)
        node_neis += [node_dict[x] for x in neis]
    dg_list = [len(degree[node_list[i]]) for i in node_inds]
    return node_inds, node_neis, dg_list


class Xi(nn.Module):
    """Xi: takes a batch of (node, neighbour) feature pairs and returns s*s matrices."""
    def __init__(self, ln, s):
        super(Xi, self).__init__()
        self.ln = ln
        self.s = s
        self.linear = nn.Linear(in_features=2 * ln, out_features=s ** 2, bias=True)
        self.tanh = nn.Tanh()

    def forward(self, X):
        bs = X.size()[0]
        out = self.tanh(self.linear(X))
        return out.view(bs, self.s, self.s)


class Rou(nn.Module):
    def __init__(self, ln, s):
        super(Rou, self).__init__()
        self.linear = nn.Linear(in_features=ln, out_features=s, bias=True)
        self.tanh = nn.Tanh()

    def forward(self, X):
        return self.tanh(self.linear(X))


class Hw(nn.Module):
    def __init__(self, ln, s, mu=0.9):
        super(Hw, self).__init__()
        self.ln = ln
        self.s = s
        self.mu = mu
        self.Xi = Xi(ln, s)
        self.Rou = Rou(ln, s)

    def forward(self, X, H, dg_list):
        if isinstance(dg_list, list):
            dg_list = torch.Tensor(dg_list)
        A = (self.Xi(X) * self.mu / self.s) / dg_list.view(-1, 1, 1)  # (N, S, S)
        b = self.Rou(torch.chunk(X, chunks=2, dim=1)[0])  # (N, S)
        out = torch.squeeze(torch.matmul(A, torch.unsqueeze(H, 2)), -1) + b
        return out  # (N, s)


class AggrSum(nn.Module):
    def __init__(self, node_num):
        super(AggrSum, self).__init__()
        self.V = node_num

    def forward(self, H, X_node):
        # H : (N, s) -> (V, s)
        mask = torch.stack([X_node] * self.V, 0)
        mask = mask.float() - torch.unsqueeze(torch.arange(0, self.V).float(), 1)
        mask = (mask == 0).float()
        return torch.mm(mask, H)


class OriLinearGNN(nn.Module):
    def __init__(self, node_num, feat_dim, stat_dim, T, mu=0.9):
        super(OriLinearGNN, self).__init__()
        self.node_num = node_num
        self.embed_dim = feat_dim
        self.stat_dim = stat_dim
        self.T = T
        # node embeddings, i.e. node feature vectors (V, ln)
        self.node_features = nn.Embedding(node_num, feat_dim)
        self.linear = nn.Linear(feat_dim + stat_dim, 3)
        self.softmax = nn.Softmax(dim=1)
        self.Hw = Hw(feat_dim, stat_dim, mu)
        self.Aggr = AggrSum(node_num)

    def forward(self, X_Node, X_Neis, dg_list):
        node_embeds = self.node_features(X_Node)  # (N, ln)
        neis_embeds = self.node_features(X_Neis)  # (N, ln)
        X = torch.cat((node_embeds, neis_embeds), 1)  # (N, 2 * ln)
        # node state vectors (V, s), re-initialised for every forward pass
        node_states = torch.zeros((self.node_num, self.stat_dim))
        # iterate T times towards the fixed point
        for t in range(self.T):
            H = torch.index_select(node_states, 0, X_Node)
            H = self.Hw(X, H, dg_list)
            node_states = self.Aggr(H, X_Node)
        out = self.linear(torch.cat((self.node_features.weight, node_states), 1))
        return self.softmax(out)  # (V, 3)


def cal_accuracy(output, label):
    out = np.argmax(output, axis=1)
    res = out - label
    return list(res).count(0) / len(res)


class Callback:
    def on_epoch_end(self, trainer, epoch, logs):
        pass


class HistoryLogger(Callback):
    def __init__(self, every):
        self.every = every
        self.history = []

    def on_epoch_end(self, trainer, epoch, logs):
        self.history.append(logs)
        if epoch % self.every == 0:
            print("==> [Epoch {}] : loss {:.4f}, train_acc {:.3f}, test_acc {:.3f}, lr {:.4f}".format(
                epoch, logs["loss"], logs["train_acc"], logs["test_acc"], logs["lr"]))


class BestLossTracker(Callback):
    def __init__(self):
        self.min_loss = float("inf")

    def on_epoch_end(self, trainer, epoch, logs):
        self.min_loss = min(self.min_loss, logs["loss"])


class Trainer:
    def __init__(self, cfg, model, callbacks=()):
        self.cfg = cfg
        self.model = model
        self.callbacks = list(callbacks)
        self.optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=cfg.lr_step,
                                                         gamma=cfg.lr_gamma)
        self.criterion = nn.CrossEntropyLoss()
        self.train_idx = torch.LongTensor(cfg.train_nodes)
        self.test_idx = torch.LongTensor(cfg.test_nodes)

    @property
    def lr(self):
        return self.optimizer.param_groups[0]["lr"]

    def train_step(self, batch):
        node_inds, node_neis, dg_list, labels = batch
        res = self.model(node_inds, node_neis, dg_list)  # (V, 3)
        train_res = torch.index_select(res, 0, self.train_idx)
        loss = self.criterion(train_res, labels[self.train_idx])
        self.optimizer.zero_grad()
        loss.backward(retain_graph=True)
        self.optimizer.step()
        return loss.item(), res

    def evaluate(self, res, labels):
        out = res.detach().numpy()
        y = labels.numpy()
        return (cal_accuracy(out[self.train_idx.numpy()], y[self.train_idx.numpy()]),
                cal_accuracy(out[self.test_idx.numpy()], y[self.test_idx.numpy()]))

    def fit(self, batch):
        for epoch in range(self.cfg.epochs):
            loss, res = self.train_step(batch)
            train_acc, test_acc = self.evaluate(res, batch[3])
            logs = {"loss": loss, "train_acc": train_acc, "test_acc": test_acc, "lr": self.lr}
            self.scheduler.step()
            for cb in self.callbacks:
                cb.on_epoch_end(self, epoch, logs)


def main():
    cfg = GNNConfig()
    seed_everything(cfg.seed)
    node_list = [n for n, _ in NODES]
    node_inds, node_neis, dg_list = build_edge_index(node_list, EDGES)
    batch = (torch.LongTensor(node_inds), torch.LongTensor(node_neis), dg_list,
             torch.LongTensor([lab for _, lab in NODES]))
    model = OriLinearGNN(node_num=len(node_list), feat_dim=cfg.feat_dim,
                         stat_dim=cfg.stat_dim, T=cfg.T, mu=cfg.mu)
    logger, tracker = HistoryLogger(cfg.log_every), BestLossTracker()
    trainer = Trainer(cfg, model, callbacks=[logger, tracker])
    trainer.fit(batch)
    print("min loss {:.4f}, final test acc {:.3f}".format(tracker.min_loss, logger.history[-1]["test_acc"]))


if __name__ == "__main__":
    main()
