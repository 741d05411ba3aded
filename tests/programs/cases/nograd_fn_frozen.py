# expect: no_grad_fn
# shape: every parameter frozen with requires_grad_(False) before the forward pass
import torch
import torch.nn as nn

model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 1))
model.requires_grad_(False)
loss = model(torch.randn(4, 3)).pow(2).mean()
loss.backward()  # raises
