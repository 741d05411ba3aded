# expect: freed_graph
# shape: backward with a gradient argument (not retain_graph) frees the graph: the second backward raises
import torch

m = torch.randn(1, 2, requires_grad=True)
k = m * 2
k.backward(torch.ones(1, 2))
k.backward(torch.ones(1, 2))  # raises
