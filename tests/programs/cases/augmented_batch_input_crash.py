# expect: grad_unused
# shape: a WGAN-div critic step marks the real batch from a generator as requiring grad, then augments it under no_grad and feeds the augmented copy to the critic; the gradient penalty differentiates with respect to the un-augmented batch
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
    real = real.requires_grad_(True)
    with torch.no_grad():
        real_in = augment(real)
    out = critic(real_in)
    (grad,) = torch.autograd.grad(out, real, torch.ones_like(out), create_graph=True)  # raises
    loss = -out.mean() + grad.pow(2).sum(1).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
