# expect: clean
# shape: a gradient penalty with create_graph=True, then one backward over the penalty and the loss
import torch

x = torch.randn(3, requires_grad=True)
y = (x.sin() * x).sum()
(g,) = torch.autograd.grad(y, x, create_graph=True)
(y + g.pow(2).sum()).backward()
