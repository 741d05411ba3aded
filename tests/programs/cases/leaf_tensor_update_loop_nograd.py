# expect: clean
# shape: the same hand-rolled gradient descent with the update under no_grad and w.grad zeroed after it
import torch

torch.manual_seed(0)
x = torch.randn(4)
w = torch.randn(4, requires_grad=True)
for i in range(3):
    loss = (w * x).sum()
    loss.backward()
    with torch.no_grad():
        w -= 0.1 * w.grad
    w.grad.zero_()
