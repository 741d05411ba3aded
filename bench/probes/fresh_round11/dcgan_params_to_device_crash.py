# expect: nonleaf_optimizer
# source: https://github.com/wangkuiyi/gotorch/issues/261
"""DCGAN-style example with hand-written parameters: generator and
discriminator weights are initialised in numpy, wrapped as tensors that require
grad, moved to the training device/dtype and handed to Adam optimizers."""
import numpy as np
import torch
import torch.nn.functional as F

torch.manual_seed(0)
rng = np.random.default_rng(0)
device = torch.device("cpu")
dtype = torch.float32

nz, nh, nx = 8, 32, 16


def init_weight(*shape):
    # DCGAN init: N(0, 0.02), done in numpy (float64)
    return rng.normal(0.0, 0.02, size=shape)


def make_param(array):
    t = torch.from_numpy(array).requires_grad_(True)
    return t.to(device=device, dtype=dtype)


G = {"w1": make_param(init_weight(nz, nh)), "w2": make_param(init_weight(nh, nx))}
D = {"w1": make_param(init_weight(nx, nh)), "w2": make_param(init_weight(nh, 1))}


def generator(z):
    return torch.tanh(F.relu(z @ G["w1"]) @ G["w2"])


def discriminator(x):
    return F.leaky_relu(x @ D["w1"], 0.2) @ D["w2"]


optG = torch.optim.Adam(list(G.values()), lr=2e-4, betas=(0.5, 0.999))  # raises
optD = torch.optim.Adam(list(D.values()), lr=2e-4, betas=(0.5, 0.999))

real_data = torch.tanh(torch.randn(256, nx))
for step in range(20):
    real = real_data[torch.randint(0, 256, (32,))]
    z = torch.randn(32, nz)
    fake = generator(z)
    d_loss = F.binary_cross_entropy_with_logits(discriminator(real), torch.ones(32, 1)) + \
        F.binary_cross_entropy_with_logits(discriminator(fake.detach()), torch.zeros(32, 1))
    optD.zero_grad()
    d_loss.backward()
    optD.step()
    g_loss = F.binary_cross_entropy_with_logits(discriminator(fake), torch.ones(32, 1))
    optG.zero_grad()
    g_loss.backward()
    optG.step()
    if step % 5 == 0:
        print(f"step {step}: d_loss {d_loss.item():.4f} g_loss {g_loss.item():.4f}")
