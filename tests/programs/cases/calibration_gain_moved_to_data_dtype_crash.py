# expect: nonleaf_optimizer
# shape: the data comes from numpy's default_rng (float64); the learnable gain is made float32
# (torch.full of a float), flagged, then converted to the data's dtype: a copy with a grad_fn
import numpy as np
import torch

rng = np.random.default_rng(0)
raw = rng.normal(size=(64, 3)) * rng.uniform(0.5, 2.0, size=3)
x = torch.from_numpy(raw)


def learnable(shape, fill, like):
    t = torch.full(shape, float(fill)).requires_grad_(True)
    return t.to(device=like.device, dtype=like.dtype)


gain = learnable((3,), 1, x)
opt = torch.optim.Adam([gain], lr=0.1)  # raises
for step in range(3):
    loss = (x * gain).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
