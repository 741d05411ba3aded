# expect: clean
# shape: only the first layer is frozen; the head still trains
import torch
import torch.nn as nn

body = nn.Linear(3, 3)
head = nn.Linear(3, 1)
for p in body.parameters():
    p.requires_grad = False
loss = head(torch.relu(body(torch.randn(4, 3)))).pow(2).mean()
loss.backward()
