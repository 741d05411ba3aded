# expect: no_grad_fn
# shape: a Sequential built with `add_module("features", ...)` and `add_module("classifier", ...)`; fine-tuning freezes every parameter whose name does not start with "head", a name this model does not use: every parameter is frozen
import torch
import torch.nn as nn

net = nn.Sequential()
net.add_module("features", nn.Linear(4, 4))
net.add_module("act", nn.ReLU())
net.add_module("classifier", nn.Linear(4, 2))
for name, param in net.named_parameters():
    if not name.startswith("head"):
        param.requires_grad = False
loss = net(torch.randn(3, 4)).pow(2).sum()
loss.backward()  # raises
