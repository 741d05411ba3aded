# expect: numpy_requires_grad
# shape: a small sparse spatial-weight class defines `__mul__`, which converts its operand with `np.asarray`; an auxiliary Moran's I target multiplies it by a normalised tensor that still requires grad
import numpy as np
import torch
import torch.nn as nn


class SparseWeights:
    def __init__(self, dense):
        self.dense = dense

    def __mul__(self, other):
        values = np.asarray(other)  # raises
        return self.dense @ values


head = nn.Linear(3, 1)
weights = SparseWeights(np.eye(4) * 0.5)
z = head(torch.randn(4, 3)).squeeze(1)
z = (z - z.mean()) / z.std()
lagged = torch.tensor(weights * z, dtype=torch.float32)
print(lagged.shape)
