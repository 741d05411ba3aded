# expect: no_grad_fn
# shape: the whole forward pass inside a no_grad block, backward after it
import torch
import torch.nn as nn

model = nn.Linear(4, 1)
with torch.no_grad():
    loss = model(torch.randn(2, 4)).pow(2).mean()
loss.backward()  # raises
