# expect: no_grad_fn
# shape: frozen parameters never made trainable again: the loss has no grad_fn
import torch
import torch.nn as nn

net = nn.Linear(4, 4)
net.requires_grad_(False)
loss = net(torch.randn(2, 4)).sum()
loss.backward()  # raises
