# expect: clean
# shape: a Sequential built with `add_module("features", ...)` and `add_module("classifier", ...)`; fine-tuning freezes every parameter whose name does not start with "classifier": torch names them `classifier.weight`, so the head stays trainable
import torch
import torch.nn as nn

net = nn.Sequential()
net.add_module("features", nn.Linear(4, 4))
net.add_module("act", nn.ReLU())
net.add_module("classifier", nn.Linear(4, 2))
for name, param in net.named_parameters():
    if not name.startswith("classifier"):
        param.requires_grad = False
loss = net(torch.randn(3, 4)).pow(2).sum()
loss.backward()
