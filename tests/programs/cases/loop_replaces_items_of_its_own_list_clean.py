# expect: clean
# shape: loops over a short list of layers that replace the list's items while they run (the items are then no longer known one by one), with and without a `continue`
import torch
import torch.nn as nn

layers = [nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)]
x = torch.randn(2, 4)
for layer in layers:
    x = torch.relu(layer(x))
    layers[0] = layer  # the layer used last goes first next time
for layer in layers:
    if layer is layers[0]:
        continue
    x = x + layer(x)
    layers[1] = layer
loss = x.pow(2).mean()
loss.backward()
