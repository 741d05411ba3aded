# expect: nonscalar_backward
# source: https://discuss.pytorch.org/t/why-doesnt-backward-work-on-nonscalar-outputs/47777
import numpy as np
import torch

np.random.seed(0)
torch.manual_seed(0)


def f(t):
    return t * t


def numerical_derivative(fn, points, eps=1e-4):
    points = np.asarray(points, dtype=np.float64)
    return (fn(points + eps) - fn(points - eps)) / (2 * eps)


points = np.sort(np.random.uniform(-3.0, 3.0, size=5)).astype(np.float32)
t1 = torch.tensor(points)
t1.requires_grad_(True)

t2 = f(t1)
t2.backward()  # raises

autograd_d = t1.grad.numpy()
numeric_d = numerical_derivative(lambda p: p * p, points)

for p, a, nd in zip(points, autograd_d, numeric_d):
    print(f"x={p:+.3f}  autograd={a:+.4f}  numeric={nd:+.4f}")

assert np.allclose(autograd_d, numeric_d, atol=1e-3)
print("derivatives match")
