# expect: numpy_requires_grad
# source: https://github.com/microsoft/EdgeML/issues/119
import math
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn


@dataclass
class BonsaiConfig:
    data_dim: int = 32
    proj_dim: int = 8
    num_classes: int = 4
    depth: int = 1
    sigma: float = 1.0
    reg_w: float = 1e-3
    reg_v: float = 1e-3
    reg_z: float = 1e-4
    sparse_z: float = 0.3
    sparse_w: float = 0.5
    sparse_v: float = 0.5
    learning_rate: float = 0.05
    batch_size: int = 32
    total_epochs: int = 6
    seed: int = 0


def hard_threshold(A, s):
    """Keep the largest-magnitude fraction `s` of entries of A, zero the rest."""
    flat = np.ravel(A)
    if s >= 1.0:
        return A
    k = max(int(math.ceil(s * flat.size)), 1)
    thr = np.sort(np.abs(flat))[::-1][k - 1]
    out = np.where(np.abs(A) >= thr, A, 0.0)
    return out.astype(A.dtype)


def count_nnz(*arrays):
    return int(sum(np.count_nonzero(a) for a in arrays))


class Bonsai(nn.Module):
    def __init__(self, cfg: BonsaiConfig):
        super().__init__()
        self.cfg = cfg
        self.total_nodes = 2 ** (cfg.depth + 1) - 1
        self.internal_nodes = 2 ** cfg.depth - 1
        L, d, p = cfg.num_classes, cfg.data_dim, cfg.proj_dim
        self.Z = nn.Parameter(torch.randn(p, d) * 0.1)
        self.W = nn.Parameter(torch.randn(L * self.total_nodes, p) * 0.1)
        self.V = nn.Parameter(torch.randn(L * self.total_nodes, p) * 0.1)
        self.T = nn.Parameter(torch.randn(self.internal_nodes, p) * 0.1)

    def forward(self, X, sigmaI):
        L = self.cfg.num_classes
        XZ = X @ self.Z.t() / self.cfg.proj_dim
        node_prob = [torch.ones(X.shape[0], 1)]
        for i in range(self.internal_nodes):
            go_left = torch.sigmoid(sigmaI * (XZ @ self.T[i].unsqueeze(1)))
            node_prob.append(node_prob[i] * go_left)
            node_prob.append(node_prob[i] * (1 - go_left))
        score = 0
        for n in range(self.total_nodes):
            Wn = self.W[n * L:(n + 1) * L]
            Vn = self.V[n * L:(n + 1) * L]
            score = score + node_prob[n] * (XZ @ Wn.t()) * torch.tanh(self.cfg.sigma * (XZ @ Vn.t()))
        return score


class BonsaiTrainer:
    def __init__(self, model: Bonsai, cfg: BonsaiConfig):
        self.bonsaiObj = model
        self.cfg = cfg
        self.optimizer = torch.optim.Adam(model.parameters(), lr=cfg.learning_rate)
        self.criterion = nn.CrossEntropyLoss()
        self.history = []

    def regulariser(self):
        m = self.bonsaiObj
        return (0.5 * self.cfg.reg_z * m.Z.pow(2).sum() + 0.5 * self.cfg.reg_w * m.W.pow(2).sum()
                + 0.5 * self.cfg.reg_v * m.V.pow(2).sum())

    def runHardThrsd(self):
        currW = np.copy(self.bonsaiObj.W)  # raises
        currV = np.copy(self.bonsaiObj.V)
        currZ = np.copy(self.bonsaiObj.Z)
        self.__thrsdW = hard_threshold(currW, self.cfg.sparse_w)
        self.__thrsdV = hard_threshold(currV, self.cfg.sparse_v)
        self.__thrsdZ = hard_threshold(currZ, self.cfg.sparse_z)
        self.bonsaiObj.W.data = torch.from_numpy(self.__thrsdW)
        self.bonsaiObj.V.data = torch.from_numpy(self.__thrsdV)
        self.bonsaiObj.Z.data = torch.from_numpy(self.__thrsdZ)
        return count_nnz(self.__thrsdW, self.__thrsdV, self.__thrsdZ)

    def accuracy(self, X, y, sigmaI):
        with torch.no_grad():
            pred = self.bonsaiObj(X, sigmaI).argmax(dim=1)
        return (pred == y).float().mean().item()

    def train(self, Xtrain, Ytrain, Xtest, Ytest):
        n = Xtrain.shape[0]
        num_iters = math.ceil(n / self.cfg.batch_size)
        total_batches = num_iters * self.cfg.total_epochs
        iht_start = total_batches // 3
        counter = 0
        sigmaI = 1.0
        for epoch in range(self.cfg.total_epochs):
            t0 = time.time()
            perm = torch.randperm(n)
            epoch_loss = 0.0
            for j in range(num_iters):
                idx = perm[j * self.cfg.batch_size:(j + 1) * self.cfg.batch_size]
                if counter > 0 and counter % 8 == 0:
                    sigmaI = min(sigmaI * 2.0, 1e4)
                self.optimizer.zero_grad()
                logits = self.bonsaiObj(Xtrain[idx], sigmaI)
                loss = self.criterion(logits, Ytrain[idx]) + self.regulariser()
                loss.backward()
                self.optimizer.step()
                epoch_loss += loss.item()
                if counter >= iht_start and counter % 4 == 0:
                    nnz = self.runHardThrsd()
                    self.history.append(("iht", counter, nnz))
                counter += 1
            test_acc = self.accuracy(Xtest, Ytest, sigmaI)
            print(f"Epoch {epoch:2d}  loss {epoch_loss / num_iters:.4f}  "
                  f"test acc {test_acc:.3f}  ({time.time() - t0:.2f}s)")
            self.history.append(("epoch", epoch, test_acc))
        return self.history


def make_data(cfg: BonsaiConfig, n_train=256, n_test=128):
    g = torch.Generator().manual_seed(cfg.seed)
    centers = torch.randn(cfg.num_classes, cfg.data_dim, generator=g) * 0.4
    def sample(n):
        y = torch.randint(0, cfg.num_classes, (n,), generator=g)
        X = centers[y] + torch.randn(n, cfg.data_dim, generator=g)
        return X, y
    return sample(n_train) + sample(n_test)


def main():
    cfg = BonsaiConfig()
    torch.manual_seed(cfg.seed)
    Xtrain, Ytrain, Xtest, Ytest = make_data(cfg)
    model = Bonsai(cfg)
    trainer = BonsaiTrainer(model, cfg)
    history = trainer.train(Xtrain, Ytrain, Xtest, Ytest)
    final_acc = [h[2] for h in history if h[0] == "epoch"][-1]
    nnz = [h[2] for h in history if h[0] == "iht"]
    print(f"final test accuracy {final_acc:.3f}; model nnz after IHT: {nnz[-1] if nnz else 'n/a'}")


if __name__ == "__main__":
    main()
