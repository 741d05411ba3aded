# expect: inplace_version
# shape: item assignment into the output of exp, which exp saved for backward
import torch

x = torch.randn(4, requires_grad=True)
e = x.exp()
e[0] = 0.0
e.sum().backward()  # raises
