# expect: freed_graph
# shape: `(w * 2).sum()` backed twice: `w * 2` still saves the number (as a wrapped tensor) for w's gradient
import torch

torch.manual_seed(0)
w = torch.randn(4, requires_grad=True)
loss = (w * 2).sum()
loss.backward()
loss.backward()  # raises
