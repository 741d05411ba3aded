# expect: no_grad_fn
# shape: a @torch.no_grad() decorated helper computes the loss
import torch
import torch.nn as nn

model = nn.Linear(4, 1)


@torch.no_grad()
def compute_loss(x):
    return model(x).pow(2).mean()


loss = compute_loss(torch.randn(2, 4))
loss.backward()  # raises
