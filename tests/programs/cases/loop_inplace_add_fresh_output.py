# expect: clean
# shape: `y = lin(h); y += 1; h = y` in a loop: each += hits only this iteration's fresh Linear output
import torch
import torch.nn as nn

torch.manual_seed(0)
lin = nn.Linear(4, 4)
h = torch.randn(2, 4)
for i in range(3):
    y = lin(h)
    y += 1
    h = y
loss = h.pow(2).sum()
loss.backward()
