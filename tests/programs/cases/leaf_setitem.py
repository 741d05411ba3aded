# expect: leaf_inplace
# shape: item assignment into a tensor created with requires_grad=True
import torch

w = torch.zeros(3, requires_grad=True)
w[1] = 2.0  # raises
