# expect: clean
# shape: the helper casts first and turns grad on last, so each weight is a leaf of the training dtype
import numpy as np
import torch

rng = np.random.default_rng(0)
DTYPE = torch.float32


def make_param(shape):
    t = torch.from_numpy(rng.normal(0.0, 0.02, size=shape)).to(dtype=DTYPE)
    return t.requires_grad_(True)


weights = {"w1": make_param((8, 16)), "w2": make_param((16, 1))}
opt = torch.optim.Adam(list(weights.values()), lr=1e-3)
x = torch.randn(32, 8)
for _ in range(3):
    loss = (torch.relu(x @ weights["w1"]) @ weights["w2"]).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
