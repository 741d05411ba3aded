# expect: clean
# shape: a loop whose backward is followed by break: the graph is never reused
import torch

x = torch.randn(3, requires_grad=True)
y = (x ** 2).sum()
for attempt in range(5):
    y.backward()
    break
