# expect: clean
# shape: the same helper without the decorator
import torch
import torch.nn as nn

model = nn.Linear(4, 1)


def compute_loss(x):
    return model(x).pow(2).mean()


loss = compute_loss(torch.randn(2, 4))
loss.backward()
