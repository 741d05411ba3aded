# expect: clean
# shape: each rate is kept as a Python number
import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
rates = []
for step in range(3):
    x = torch.randn(16, 4)
    rate = torch.sigmoid(model(x)).mean()
    optimizer.zero_grad()
    (1 - rate).backward()
    optimizer.step()
    rates.append(rate.item())
curve = np.atleast_1d(rates)
print(curve.shape)
