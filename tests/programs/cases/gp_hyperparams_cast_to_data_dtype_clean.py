# expect: clean
# shape: the hyperparameters are made in the data's dtype, so they stay leaves
import numpy as np
import torch

rng = np.random.default_rng(0)
parts = [rng.uniform(-1, 1, size=(50, 2)), rng.uniform(-1, 1, size=(30, 2))]
X = torch.from_numpy(np.concatenate(parts))
Y = torch.sin(3 * X[:, 0])

length_scale = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
noise = torch.tensor(1e-2, dtype=X.dtype, requires_grad=True)


def kernel(a, b, ls):
    return torch.exp(-torch.cdist(a, b) ** 2 / (2 * ls ** 2))


optimizer = torch.optim.Adam([length_scale, noise], lr=0.05)
for it in range(5):
    optimizer.zero_grad()
    K = kernel(X, X, length_scale) + noise.abs() * torch.eye(len(X), dtype=X.dtype)
    loss = -torch.distributions.MultivariateNormal(torch.zeros_like(Y), K).log_prob(Y)
    loss.backward()
    optimizer.step()
