# expect: clean
# shape: an in-place add on a tensor that no op saved (mul by a constant saves nothing)
import torch

x = torch.randn(4, requires_grad=True)
y = x * 2
y += 1
y.sum().backward()
