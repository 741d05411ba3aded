# expect: nonscalar_backward
# shape: the points come from numpy (five of them, float32 after astype), so f(t) has five
# elements and backward() without a gradient refuses it
import numpy as np
import torch

np.random.seed(0)


def f(t):
    return t * t


points = np.sort(np.random.uniform(-3.0, 3.0, size=5)).astype(np.float32)
t = torch.tensor(points, requires_grad=True)
y = f(t)
y.backward()  # raises
print(t.grad)
