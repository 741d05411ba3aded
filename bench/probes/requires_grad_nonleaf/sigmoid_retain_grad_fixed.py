# expect: clean
# source: https://github.com/pytorch/pytorch/issues/3890
import numpy as np
import torch

torch.manual_seed(0)
np.random.seed(0)

# want d(total)/d(s) for the sigmoid output as well as d(total)/d(x)
x = torch.zeros(3, 3, requires_grad=True)
w = torch.from_numpy(np.random.randn(3, 3).astype(np.float32))

s = torch.sigmoid(x @ w)
s.retain_grad()

total = torch.sum(s * s)
total.backward()

assert s.grad is not None
assert x.grad is not None

print("grad wrt sigmoid output:")
print(s.grad)
print("grad wrt x:")
print(x.grad)

# analytic check: d(sum s^2)/ds = 2s
expected = 2 * s.detach()
print("max abs diff:", (s.grad - expected).abs().max().item())

# chain rule back to x: dL/dx = (dL/ds * s * (1 - s)) @ w^T
expected_x = (expected * s.detach() * (1 - s.detach())) @ w.t()
print("x grad diff:", (x.grad - expected_x).abs().max().item())
