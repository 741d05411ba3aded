# expect: leaf_inplace
# shape: hand-rolled gradient descent on a raw leaf tensor, `w -= 0.1 * w.grad` in the loop without no_grad
import torch

torch.manual_seed(0)
x = torch.randn(4)
w = torch.randn(4, requires_grad=True)
for i in range(3):
    loss = (w * x).sum()
    loss.backward()
    w -= 0.1 * w.grad  # raises
