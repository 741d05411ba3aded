# expect: no_grad_fn
# shape: torch.set_grad_enabled(False) called as a statement (left over from evaluation) before training
import torch
import torch.nn as nn

model = nn.Linear(4, 1)
torch.set_grad_enabled(False)
loss = model(torch.randn(3, 4)).pow(2).mean()
loss.backward()  # raises
