# expect: clean
# shape: np.sqrt of an int64 array is float64: .double() of the tensor made from it is the tensor
# itself, a leaf
import numpy as np
import torch

counts = np.random.randint(1, 5, size=4)           # int64
w = torch.tensor(np.sqrt(counts), requires_grad=True)  # np.sqrt gives float64
v = w.double()                                     # float64 already: w itself
opt = torch.optim.SGD([v], lr=0.1)
(v * 2).sum().backward()
opt.step()
