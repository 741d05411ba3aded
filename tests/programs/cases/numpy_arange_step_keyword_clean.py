# expect: clean
# shape: np.arange(0, 10, step=5) has two elements (the step given by keyword), so the tensor made
# from len - 1 has one
import numpy as np
import torch

t = torch.from_numpy(np.arange(0, 10, step=5))          # [0, 5]: 2 elements
z = torch.randn(len(t) - 1, requires_grad=True)          # one element
(z * 2).backward()
