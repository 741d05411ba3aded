# expect: requires_grad_nonleaf
# shape: weights made with requires_grad=True, then converted with `.type(dtype)` to a legacy tensor type (DoubleTensor here, cuda.FloatTensor on a GPU): the copy is not a leaf, and setting its flag raises
import torch

dtype = torch.cuda.FloatTensor if torch.cuda.is_available() else torch.DoubleTensor
w1 = torch.randn(10, 100, requires_grad=True).type(dtype)
w1.requires_grad = True  # raises
x = torch.randn(4, 10).type(dtype)
(x @ w1).sum().backward()
