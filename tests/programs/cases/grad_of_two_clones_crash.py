# expect: grad_unused
# shape: two `autograd.grad` calls each differentiate by a `.clone()` made in the call (a new tensor the loss never used); the first raises, and the second is reached only once the first is fixed
import torch

torch.manual_seed(0)
w = torch.randn(4, requires_grad=True)
loss1 = (w * 2).pow(2).sum()
loss2 = w.tanh().sum()
g1 = torch.autograd.grad(loss1, w.clone(), retain_graph=True)  # raises
g2 = torch.autograd.grad(loss2, w.clone())
print(g1, g2)
