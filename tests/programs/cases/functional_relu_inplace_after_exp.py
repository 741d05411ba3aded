# expect: inplace_version
# shape: F.relu(..., inplace=True) on the output of exp, which exp saved
import torch
import torch.nn.functional as F

w = torch.randn(5, requires_grad=True)
e = torch.exp(w)
F.relu(e, inplace=True)
e.sum().backward()  # raises
