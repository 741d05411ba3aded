# expect: leaf_inplace
# shape: normalising an input that requires grad in place
import torch

x = torch.randn(4, 3, requires_grad=True)
x.sub_(x.mean(0))  # raises
