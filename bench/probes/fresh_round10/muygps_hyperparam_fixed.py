# expect: clean
# source: https://github.com/llnl/MuyGPyS/pull/184
"""Leave-one-out hyperparameter fit of a local (nearest-neighbour) Gaussian
process in the MuyGPs style with the torch backend: the RBF length scale and the
homoscedastic noise are optimised with Adam on a synthetic 2-D regression set
held in float64, as the numpy backend does."""
import numpy as np
import torch

torch.manual_seed(0)
rng = np.random.default_rng(0)

# float64 data, as produced by the numpy side of the library
train_x = rng.uniform(-1, 1, size=(300, 2))
train_y = np.sin(3 * train_x[:, 0]) * np.cos(2 * train_x[:, 1]) + 0.05 * rng.normal(size=300)
X = torch.from_numpy(train_x)
Y = torch.from_numpy(train_y)
nn_count = 15

# nearest neighbours of every training point (excluding itself)
dists = torch.cdist(X, X)
nn_idx = dists.topk(nn_count + 1, largest=False).indices[:, 1:]

length_scale = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
noise = torch.tensor(1e-2, dtype=torch.float64, requires_grad=True)


def rbf(d2, ls):
    return torch.exp(-d2 / (2 * ls ** 2))


def loo_predict(ls, eps):
    nx = X[nn_idx]                                   # (n, k, 2)
    pair = ((nx[:, :, None, :] - nx[:, None, :, :]) ** 2).sum(-1)
    cross = ((X[:, None, :] - nx) ** 2).sum(-1)       # (n, k)
    K = rbf(pair, ls) + eps * torch.eye(nn_count, dtype=X.dtype)
    Kcross = rbf(cross, ls)
    sol = torch.linalg.solve(K, Y[nn_idx].unsqueeze(-1)).squeeze(-1)
    return (Kcross * sol).sum(-1)


optimizer = torch.optim.Adam([length_scale, noise], lr=0.05)
for it in range(40):
    optimizer.zero_grad()
    pred = loo_predict(length_scale, noise.abs() + 1e-6)
    loss = ((pred - Y) ** 2).mean()
    loss.backward()
    optimizer.step()
    if it % 10 == 0:
        print("iter %2d  mse %.5f  ls %.3f" % (it, loss.item(), length_scale.item()))
