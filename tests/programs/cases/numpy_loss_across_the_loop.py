# expect: no_grad_fn
# shape: predictions taken to numpy in the loop, a numpy loss function, the result wrapped back
import numpy as np
import torch
import torch.nn as nn


def log_loss(p, y):
    p = np.clip(p, 1e-6, 1 - 1e-6)
    return np.mean(-(y * np.log(p) + (1 - y) * np.log(1 - p)))


net = nn.Linear(4, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
x, y = torch.randn(12, 4), (torch.rand(12, 1) > 0.5).float()
for step in range(2):
    p = torch.sigmoid(net(x)).detach().numpy()
    loss = torch.tensor(log_loss(p, y.numpy()), dtype=torch.float32)
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
