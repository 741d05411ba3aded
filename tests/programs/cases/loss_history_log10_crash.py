# expect: numpy_requires_grad
# shape: a learning-rate sweep keeps each step's loss tensor in a per-rate history, then a summary takes np.log10 of a history: numpy converts every loss, and they still require grad
import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)
x, y = torch.randn(32, 6), torch.randn(32, 1)
rates = [1e-3, 1e-2]
history = [[] for _ in rates]
for j, lr in enumerate(rates):
    model = nn.Linear(6, 1)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for step in range(3):
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        history[j].append(loss)
    print(lr, np.log10(history[j])[-1])  # raises
