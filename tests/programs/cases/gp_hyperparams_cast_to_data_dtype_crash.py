# expect: nonleaf_optimizer
# shape: hyperparameters made as float32 leaves, then cast to the float64 of numpy-built data: the casts are new tensors with a grad_fn, and the optimizer refuses them
import numpy as np
import torch

rng = np.random.default_rng(0)
parts = [rng.uniform(-1, 1, size=(50, 2)), rng.uniform(-1, 1, size=(30, 2))]
X = torch.from_numpy(np.concatenate(parts))
Y = torch.sin(3 * X[:, 0])

length_scale = torch.tensor(0.5, requires_grad=True).to(torch.float64)
noise = torch.tensor(1e-2, requires_grad=True).type_as(X)


def kernel(a, b, ls):
    return torch.exp(-torch.cdist(a, b) ** 2 / (2 * ls ** 2))


optimizer = torch.optim.Adam([length_scale, noise], lr=0.05)  # raises
for it in range(5):
    optimizer.zero_grad()
    K = kernel(X, X, length_scale) + noise.abs() * torch.eye(len(X), dtype=X.dtype)
    loss = -torch.distributions.MultivariateNormal(torch.zeros_like(Y), K).log_prob(Y)
    loss.backward()
    optimizer.step()
