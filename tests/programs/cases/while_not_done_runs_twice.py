# expect: freed_graph
# shape: the same loop, stopping only after the second pass: the second backward reaches the freed graph of `out`
import torch
import torch.nn as nn

model = nn.Linear(4, 1)
x = torch.randn(8, 4)
out = model(x)
passes = 0
while passes < 2:
    loss = out.pow(2).mean()
    loss.backward()  # raises
    passes += 1
