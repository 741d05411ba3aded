# expect: clean
# shape: `(w + 2).sum()` backed twice: add and sum save no tensors, so the second backward just accumulates
import torch

torch.manual_seed(0)
w = torch.randn(4, requires_grad=True)
loss = (w + 2).sum()
loss.backward()
loss.backward()
