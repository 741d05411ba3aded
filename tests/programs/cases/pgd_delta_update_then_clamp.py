# expect: leaf_inplace
# shape: an adversarial perturbation updated with += and clamped in place, outside no_grad
import torch
import torch.nn as nn
import torch.nn.functional as F

model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
x, y = torch.rand(4, 6), torch.randint(0, 3, (4,))
delta = torch.zeros_like(x, requires_grad=True)
for _ in range(3):
    loss = F.cross_entropy(model(x + delta), y)
    loss.backward()
    delta += 0.01 * delta.grad.sign()  # raises
    delta.clamp_(-0.1, 0.1)
    delta.grad.zero_()
