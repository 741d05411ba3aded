# expect: requires_grad_nonleaf
# shape: a backend-style stop_gradient helper turns off requires_grad on what it is given;
# torch.is_tensor says the encoder output passes through as it is, a non-leaf
import torch
import torch.nn as nn


def convert_to_tensor(x, dtype=torch.float32):
    return x if torch.is_tensor(x) else torch.as_tensor(x, dtype=dtype)


def stop_gradient(value):
    return value.requires_grad_(False)  # raises


torch.manual_seed(0)
encoder = nn.Linear(8, 4)
predictor = nn.Linear(4, 4)
x = torch.randn(16, 8)
z = encoder(x)
target = stop_gradient(convert_to_tensor(z))
loss = (predictor(z) - target).pow(2).mean()
loss.backward()
