# expect: freed_graph
# shape: backward in a try body, again in finally
import torch

x = torch.randn(3, requires_grad=True)
loss = (x.exp()).sum()
try:
    loss.backward()
finally:
    loss.backward()  # raises
