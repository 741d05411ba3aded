# expect: clean
# shape: the data comes from numpy's default_rng (float64); the learnable gain is made float32
# (torch.full of a float), converted to the data's dtype, then flagged: still a leaf
import numpy as np
import torch

rng = np.random.default_rng(0)
raw = rng.normal(size=(64, 3)) * rng.uniform(0.5, 2.0, size=3)
x = torch.from_numpy(raw)


def learnable(shape, fill, like):
    t = torch.full(shape, float(fill))
    return t.to(device=like.device, dtype=like.dtype).requires_grad_(True)


gain = learnable((3,), 1, x)
opt = torch.optim.Adam([gain], lr=0.1)
for step in range(3):
    loss = (x * gain).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
