# expect: freed_graph
# shape: torch.autograd.grad frees the graph (retain_graph defaults to create_graph=False), then backward needs it
import torch

x = torch.randn(3, requires_grad=True)
y = (x.sin() * x).sum()
(g,) = torch.autograd.grad(y, x)
y.backward()  # raises
