# expect: clean
# shape: weights converted with `.type(dtype)` first, then made to require grad: the flag is set on the converted leaf
import torch

dtype = torch.cuda.FloatTensor if torch.cuda.is_available() else torch.DoubleTensor
w1 = torch.randn(10, 100).type(dtype)
w1.requires_grad = True
x = torch.randn(4, 10).type(dtype)
(x @ w1).sum().backward()
