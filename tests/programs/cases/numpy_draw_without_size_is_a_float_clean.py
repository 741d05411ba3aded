# expect: clean
# shape: np.random.uniform(-1, 1) without a size is a Python float: torch.tensor makes float32, so
# .float() is the tensor itself, a leaf
import numpy as np
import torch

x = torch.tensor(np.random.uniform(-1.0, 1.0), requires_grad=True)  # a Python float: float32
w = x.float()  # float32 already: x itself, a leaf
opt = torch.optim.SGD([w], lr=0.1)
loss = (w * 2).sum()
loss.backward()
opt.step()
