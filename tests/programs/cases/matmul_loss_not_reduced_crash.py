# expect: nonscalar_backward
# shape: a least-squares residual computed with `@` is backpropagated without a reduction: its shape follows from matmul's rule, (64, 3)
import torch

torch.manual_seed(0)
A = torch.randn(64, 5)
W = torch.zeros(5, 3, requires_grad=True)
B = torch.randn(64, 3)
residual = (A @ W - B) ** 2
residual.backward()  # raises
