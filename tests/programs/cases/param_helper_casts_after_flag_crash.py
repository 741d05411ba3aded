# expect: nonleaf_optimizer
# shape: a helper makes each weight from numpy, turns its grad on, then casts it to the training dtype; the cast copy is what the optimizer gets
import numpy as np
import torch

rng = np.random.default_rng(0)
DTYPE = torch.float32


def make_param(shape):
    t = torch.from_numpy(rng.normal(0.0, 0.02, size=shape)).requires_grad_(True)
    return t.to(dtype=DTYPE)


weights = {"w1": make_param((8, 16)), "w2": make_param((16, 1))}
opt = torch.optim.Adam(list(weights.values()), lr=1e-3)  # raises
x = torch.randn(32, 8)
for _ in range(3):
    loss = (torch.relu(x @ weights["w1"]) @ weights["w2"]).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
