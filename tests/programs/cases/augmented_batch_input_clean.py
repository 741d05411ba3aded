# expect: clean
# shape: the same critic step augments first and marks the augmented batch the real batch from a generator as requiring grad, so the gradient penalty differentiates the critic's input
import numpy as np
import torch
import torch.nn as nn


def batches(rng, n):
    while True:
        yield torch.from_numpy(rng.uniform(-1, 1, size=(n, 8)).astype(np.float32))


def augment(x):
    return x + 0.01 * torch.randn(x.shape)


critic = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
opt = torch.optim.Adam(critic.parameters(), lr=1e-4)
data = batches(np.random.default_rng(0), 4)
for step in range(3):
    real = next(data)
    with torch.no_grad():
        real_in = augment(real)
    real_in.requires_grad_(True)
    out = critic(real_in)
    (grad,) = torch.autograd.grad(out, real_in, torch.ones_like(out), create_graph=True)
    loss = -out.mean() + grad.pow(2).sum(1).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
