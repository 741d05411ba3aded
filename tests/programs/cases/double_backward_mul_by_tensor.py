# expect: freed_graph
# shape: `(w * x).sum()` backed twice: mul by a tensor saves x for w's gradient
import torch

torch.manual_seed(0)
x = torch.randn(4)
w = torch.randn(4, requires_grad=True)
loss = (w * x).sum()
loss.backward()
loss.backward()  # raises
