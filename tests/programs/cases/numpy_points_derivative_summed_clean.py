# expect: clean
# shape: the points come from numpy (five of them), and the backward is of the sum of f(t),
# one element, which gives each point its derivative
import numpy as np
import torch

np.random.seed(0)


def f(t):
    return t * t


points = np.sort(np.random.uniform(-3.0, 3.0, size=5)).astype(np.float32)
t = torch.tensor(points, requires_grad=True)
y = f(t)
y.sum().backward()
print(t.grad)
