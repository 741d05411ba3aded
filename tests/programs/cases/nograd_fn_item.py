# expect: no_grad_fn
# shape: a loss rebuilt from .item() values has no graph
import torch
import torch.nn as nn

model = nn.Linear(3, 1)
pred = model(torch.randn(4, 3))
loss = torch.tensor(pred.mean().item())
loss.backward()  # raises
