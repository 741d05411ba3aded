# expect: inplace_version
# shape: the same loop with `y = torch.sigmoid(lin(h)); y += 1`: the += overwrites the output sigmoid saved
import torch
import torch.nn as nn

torch.manual_seed(0)
lin = nn.Linear(4, 4)
h = torch.randn(2, 4)
for i in range(3):
    y = torch.sigmoid(lin(h))
    y += 1
    h = y
loss = h.pow(2).sum()
loss.backward()  # raises
