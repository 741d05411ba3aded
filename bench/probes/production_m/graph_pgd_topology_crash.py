# expect: numpy_requires_grad
# source: https://github.com/DSE-MSU/DeepRobust/pull/16
"""Untargeted structure poisoning of a GCN with the PGD topology attack
(Xu et al., "Topology Attack and Defense for Graph Neural Networks").

Follows DeepRobust's graph package: utils (to_tensor, normalize_adj_tensor),
a dense two-layer GCN surrogate with fit / predict, BaseAttack, and PGDAttack
(gradient ascent on a relaxed edge-flip vector, bisection projection onto the
budget, then random Bernoulli sampling of the final perturbation), driven by
a test_pgd-style script on a synthetic two-community graph.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parameter import Parameter

torch.manual_seed(15)
np.random.seed(15)


# ------------------------------------------------------------------ deeprobust/graph/utils.py
def to_tensor(adj, features, labels, device="cpu"):
    return (torch.FloatTensor(np.asarray(adj)).to(device),
            torch.FloatTensor(np.asarray(features)).to(device),
            torch.LongTensor(labels).to(device))


def normalize_adj_tensor(adj):
    mx = adj + torch.eye(adj.shape[0]).to(adj.device)
    rowsum = mx.sum(1)
    r_inv = rowsum.pow(-1 / 2).flatten()
    r_inv[torch.isinf(r_inv)] = 0.0
    r_mat_inv = torch.diag(r_inv)
    mx = r_mat_inv @ mx
    mx = mx @ r_mat_inv
    return mx


def accuracy(output, labels):
    preds = output.max(1)[1].type_as(labels)
    return preds.eq(labels).double().sum() / len(labels)


# ------------------------------------------------------------------ deeprobust/graph/defense/gcn.py
class GraphConvolution(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = Parameter(torch.empty(in_features, out_features))
        self.bias = Parameter(torch.zeros(out_features))
        nn.init.xavier_uniform_(self.weight)

    def forward(self, x, adj_norm):
        return adj_norm @ (x @ self.weight) + self.bias


class GCN(nn.Module):
    def __init__(self, nfeat, nhid, nclass, dropout=0.5, lr=0.01, weight_decay=5e-4, device="cpu"):
        super().__init__()
        self.gc1 = GraphConvolution(nfeat, nhid)
        self.gc2 = GraphConvolution(nhid, nclass)
        self.dropout, self.lr, self.weight_decay, self.device = dropout, lr, weight_decay, device

    def forward(self, x, adj_norm):
        x = F.relu(self.gc1(x, adj_norm))
        x = F.dropout(x, self.dropout, training=self.training)
        return F.log_softmax(self.gc2(x, adj_norm), dim=1)

    def fit(self, features, adj, labels, idx_train, train_iters=100):
        self.train()
        adj_norm = normalize_adj_tensor(adj)
        optimizer = torch.optim.Adam(self.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        for _ in range(train_iters):
            optimizer.zero_grad()
            output = self.forward(features, adj_norm)
            loss_train = F.nll_loss(output[idx_train], labels[idx_train])
            loss_train.backward()
            optimizer.step()
        self.eval()

    def test(self, features, adj, labels, idx_test):
        self.eval()
        with torch.no_grad():
            output = self.forward(features, normalize_adj_tensor(adj))
        return accuracy(output[idx_test], labels[idx_test]).item()


# ------------------------------------------------------------------ deeprobust/graph/global_attack
class BaseAttack(nn.Module):
    def __init__(self, model, nnodes, attack_structure=True, attack_features=False, device="cpu"):
        super().__init__()
        self.surrogate, self.nnodes = model, nnodes
        self.attack_structure, self.attack_features, self.device = attack_structure, attack_features, device
        self.modified_adj = None


class PGDAttack(BaseAttack):
    def __init__(self, model=None, nnodes=None, loss_type="CE", attack_structure=True, attack_features=False,
                 device="cpu", epochs=200):
        super().__init__(model, nnodes, attack_structure, attack_features, device)
        assert attack_features or attack_structure, "attack_features or attack_structure cannot be both False"
        self.loss_type, self.epochs = loss_type, epochs
        if attack_structure:
            assert nnodes is not None, "Please give nnodes="
            self.adj_changes = Parameter(torch.FloatTensor(int(nnodes * (nnodes - 1) / 2)))
            self.adj_changes.data.fill_(0)
        self.complementary = None

    def attack(self, ori_features, ori_adj, labels, idx_train, perturbations):
        victim_model = self.surrogate
        ori_adj, ori_features, labels = to_tensor(ori_adj, ori_features, labels, device=self.device)
        victim_model.eval()
        for t in range(self.epochs):
            modified_adj = self.get_modified_adj(ori_adj)
            adj_norm = normalize_adj_tensor(modified_adj)
            output = victim_model(ori_features, adj_norm)
            loss = self._loss(output[idx_train], labels[idx_train])
            adj_grad = torch.autograd.grad(loss, self.adj_changes)[0]
            if self.loss_type == "CE":
                lr = 200 / np.sqrt(t + 1)
                self.adj_changes.data.add_(lr * adj_grad)
            self.projection(perturbations)
        self.random_sample(ori_adj, ori_features, labels, idx_train, perturbations)
        self.modified_adj = self.get_modified_adj(ori_adj).detach()

    def random_sample(self, ori_adj, ori_features, labels, idx_train, perturbations):
        K = 20
        best_loss = -1000
        victim_model = self.surrogate
        s = self.adj_changes.cpu().numpy()  # raises
        with torch.no_grad():
            for i in range(K):
                sampled = np.random.binomial(1, s)
                if sampled.sum() > perturbations:
                    continue
                self.adj_changes.data.copy_(torch.tensor(sampled))
                modified_adj = self.get_modified_adj(ori_adj)
                adj_norm = normalize_adj_tensor(modified_adj)
                output = victim_model(ori_features, adj_norm)
                loss = self._loss(output[idx_train], labels[idx_train])
                if best_loss < loss:
                    best_loss = loss
                    best_s = sampled
            self.adj_changes.data.copy_(torch.tensor(best_s))

    def _loss(self, output, labels):
        return F.nll_loss(output, labels)

    def projection(self, perturbations):
        if torch.clamp(self.adj_changes, 0, 1).sum() > perturbations:
            left = (self.adj_changes - 1).min()
            right = self.adj_changes.max()
            miu = self.bisection(left, right, perturbations, epsilon=1e-5)
            self.adj_changes.data.copy_(torch.clamp(self.adj_changes.data - miu, min=0, max=1))
        else:
            self.adj_changes.data.copy_(torch.clamp(self.adj_changes.data, min=0, max=1))

    def get_modified_adj(self, ori_adj):
        if self.complementary is None:
            self.complementary = (torch.ones_like(ori_adj) - torch.eye(self.nnodes).to(self.device) - ori_adj) - ori_adj
        m = torch.zeros((self.nnodes, self.nnodes)).to(self.device)
        tril_indices = torch.tril_indices(row=self.nnodes, col=self.nnodes, offset=-1)
        m[tril_indices[0], tril_indices[1]] = self.adj_changes
        m = m + m.t()
        return self.complementary * m + ori_adj

    def bisection(self, a, b, perturbations, epsilon):
        def func(x):
            return torch.clamp(self.adj_changes - x, 0, 1).sum() - perturbations

        miu = a
        while (b - a) >= epsilon:
            miu = (a + b) / 2
            if func(miu) == 0.0:
                break
            if func(miu) * func(a) < 0:
                b = miu
            else:
                a = miu
        return miu


# ------------------------------------------------------------------ examples/graph/test_pgd.py
def two_community_graph(n=40, nfeat=12, p_in=0.25, p_out=0.03):
    labels = np.array([0] * (n // 2) + [1] * (n - n // 2))
    prob = np.where(labels[:, None] == labels[None, :], p_in, p_out)
    upper = np.triu(np.random.rand(n, n) < prob, k=1)
    adj = (upper | upper.T).astype(np.float32)
    feats = np.random.randn(n, nfeat).astype(np.float32) * 0.8
    feats[:, 0] += 1.5 * (labels * 2 - 1) * 0.4
    return adj, feats, labels


def main():
    adj, features, labels = two_community_graph()
    idx = np.random.permutation(len(labels))
    idx_train, idx_test = idx[:16], idx[16:]
    perturbations = int(0.05 * (adj.sum() // 2))

    adj_t, features_t, labels_t = to_tensor(adj, features, labels)
    victim_model = GCN(nfeat=features.shape[1], nhid=16, nclass=int(labels.max()) + 1, dropout=0.5)
    victim_model.fit(features_t, adj_t, labels_t, idx_train, train_iters=100)
    print("clean test acc:", round(victim_model.test(features_t, adj_t, labels_t, idx_test), 3))

    model = PGDAttack(model=victim_model, nnodes=adj.shape[0], loss_type="CE", epochs=30)
    model.attack(features, adj, labels, idx_train, perturbations)
    modified_adj = model.modified_adj
    print("flipped edges:", int((modified_adj - adj_t).abs().sum().item() // 2), "budget:", perturbations)
    print("poisoned test acc:", round(victim_model.test(features_t, modified_adj, labels_t, idx_test), 3))


if __name__ == "__main__":
    main()
