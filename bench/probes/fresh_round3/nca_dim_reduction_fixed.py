# expect: clean
# source: https://github.com/kevinzakka/torchnca/issues/5
"""Neighbourhood Components Analysis for dimensionality reduction (dim_reduct example)."""
import argparse

import numpy as np
import torch


class NCA:
    """Neighbourhood Components Analysis [1].

    References:
      [1]: https://www.cs.toronto.edu/~hinton/absps/nca.pdf
    """

    def __init__(self, dim=None, init="random", max_iters=500, tol=1e-5):
        self.dim = dim
        self.init = init
        self.max_iters = max_iters
        self.tol = tol
        self._mean = None
        self._stddev = None
        self._losses = None

    def __call__(self, X):
        if self._mean is not None and self._stddev is not None:
            X = (X - self._mean) / self._stddev
        return torch.mm(X, torch.t(self.A))

    def _init_transformation(self):
        if self.dim is None:
            self.dim = self.num_dims
        if self.init == "random":
            a = torch.randn(self.dim, self.num_dims, device=self.device, dtype=self.dtype) * 0.01
            self.A = torch.nn.Parameter(a)
        elif self.init == "identity":
            a = torch.eye(self.dim, self.num_dims, device=self.device, dtype=self.dtype)
            self.A = torch.nn.Parameter(a)
        else:
            raise ValueError("[!] {} initialization is not supported.".format(self.init))

    @staticmethod
    def _pairwise_l2_sq(x):
        dot = torch.mm(x.double(), torch.t(x.double()))
        norm_sq = torch.diag(dot)
        dist = norm_sq[None, :] - 2 * dot + norm_sq[:, None]
        dist = torch.clamp(dist, min=0)
        return dist.to(x.dtype)

    @staticmethod
    def _softmax(x):
        exp = torch.exp(x)
        return exp / exp.sum(dim=1)

    @property
    def losses(self):
        if self._losses is None:
            raise ValueError("There are no losses to report. You must call train first.")
        return self._losses

    def loss(self, X, y_mask):
        embedding = torch.mm(X, torch.t(self.A))
        distances = self._pairwise_l2_sq(embedding)
        distances.diagonal().copy_(np.inf * torch.ones(len(distances)))
        p_ij = self._softmax(-distances)
        p_ij_mask = p_ij * y_mask.to(p_ij.dtype)
        p_i = p_ij_mask.sum(dim=1)
        classification_loss = -torch.log(torch.masked_select(p_i, p_i != 0)).sum()
        distances.diagonal().copy_(torch.zeros(len(distances)))
        diff_class_distances = distances * (~y_mask).to(distances.dtype)
        hinge_loss = torch.clamp(1 - diff_class_distances, min=0).pow(2).sum(1).mean()
        return classification_loss + hinge_loss

    def train(self, X, y, batch_size=None, lr=1e-4, momentum=0.9, weight_decay=10, normalize=True):
        self._losses = []
        self.num_train, self.num_dims = X.shape
        self.device = X.device
        self.dtype = X.dtype
        if batch_size is None:
            batch_size = self.num_train
        batch_size = min(batch_size, self.num_train)

        self._init_transformation()

        if normalize:
            self._mean = X.mean(dim=0)
            self._stddev = X.std(dim=0)
            X = (X - self._mean) / self._stddev

        optim_args = {"lr": lr, "weight_decay": weight_decay, "momentum": momentum}
        optimizer = torch.optim.SGD([self.A], **optim_args)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=50, gamma=0.5)

        iters_per_epoch = int(np.ceil(self.num_train / batch_size))
        a_prev = self.A.detach().clone()
        for epoch in range(self.max_iters):
            rand_idxs = torch.randperm(len(y))
            X_shuffled, y_shuffled = X[rand_idxs], y[rand_idxs]
            for i in range(iters_per_epoch):
                X_batch = X_shuffled[i * batch_size:(i + 1) * batch_size]
                y_batch = y_shuffled[i * batch_size:(i + 1) * batch_size]
                y_mask = y_batch[:, None] == y_batch[None, :]
                loss = self.loss(X_batch, y_mask)
                self._losses.append(loss.item())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            scheduler.step()
            if torch.norm(self.A.detach() - a_prev) < self.tol:
                print("Converged at epoch {}".format(epoch))
                break
            a_prev = self.A.detach().clone()
        return self


def make_circle(r, num_samples):
    t = np.linspace(0, 2 * np.pi, num_samples)
    x = r * np.cos(t) + 0.2 * np.random.randn(num_samples)
    y = r * np.sin(t) + 0.2 * np.random.randn(num_samples)
    return x, y


def gen_data(num_samples, num_classes, mean, std):
    num_samples_per = num_samples // num_classes
    X, y = [], []
    for i in range(num_classes):
        x1, x2 = make_circle(i + 1.5, num_samples_per)
        x3 = std * np.random.randn(num_samples_per) + mean
        X.append(np.stack([x1, x2, x3]))
        y.append(np.repeat(i, num_samples_per))
    X = np.concatenate(X, axis=1)
    y = np.concatenate(y)
    indices = np.random.permutation(X.shape[1])
    return X[:, indices].T, y[indices]


def pca(X, dim):
    Xc = X - X.mean(0)
    _, _, vt = np.linalg.svd(Xc, full_matrices=False)
    return Xc @ vt[:dim].T


def knn_accuracy(emb, y, k=5):
    d = ((emb[:, None, :] - emb[None, :, :]) ** 2).sum(-1)
    np.fill_diagonal(d, np.inf)
    nn_idx = np.argsort(d, axis=1)[:, :k]
    votes = y[nn_idx]
    pred = np.array([np.bincount(v).argmax() for v in votes])
    return (pred == y).mean()


def main(args):
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    X, y = gen_data(args.num_samples, args.num_classes, args.mean, args.std)
    print("raw 2-d kNN accuracy: {:.3f}".format(knn_accuracy(X[:, :2], y)))
    print("pca kNN accuracy: {:.3f}".format(knn_accuracy(pca(X, 2), y)))

    X_t = torch.from_numpy(X)
    y_t = torch.from_numpy(y).long()
    nca = NCA(dim=2, init=args.init, max_iters=args.max_iters, tol=1e-5)
    nca.train(X_t, y_t, batch_size=args.batch_size, lr=args.lr, weight_decay=args.weight_decay)
    with torch.no_grad():
        X_nca = nca(X_t).numpy()
    print("nca kNN accuracy: {:.3f} (final loss {:.3f})".format(knn_accuracy(X_nca, y), nca.losses[-1]))


if __name__ == "__main__":
    main(argparse.Namespace(seed=0, num_samples=300, num_classes=3, mean=0.0, std=5.0,
                            init="identity", max_iters=40, batch_size=64, lr=1e-3, weight_decay=10))
