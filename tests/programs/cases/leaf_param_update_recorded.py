# expect: leaf_inplace
# shape: the same update without no_grad
import torch
import torch.nn as nn

model = nn.Linear(3, 1)
for step in range(3):
    loss = model(torch.randn(4, 3)).pow(2).mean()
    model.zero_grad()
    loss.backward()
    for p in model.parameters():
        p -= 0.1 * p.grad  # raises
