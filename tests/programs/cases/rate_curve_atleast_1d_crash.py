# expect: numpy_requires_grad
# shape: per-step rates kept as tensors with their graph are plotted through np.atleast_1d, which converts each of them
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
    rates.append(rate)
curve = np.atleast_1d(rates)  # raises
print(curve.shape)
