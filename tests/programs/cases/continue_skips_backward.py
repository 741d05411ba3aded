# expect: freed_graph
# shape: continue skips the rebuild on odd steps, so the next backward reuses the freed graph
import torch

x = torch.randn(3, requires_grad=True)
y = (x ** 2).sum()
for step in range(4):
    if step % 2 == 1:
        y.backward()  # raises
        continue
    y = (x ** 2).sum()
    y.backward(retain_graph=False)
