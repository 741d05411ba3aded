# expect: clean
# shape: the same hooked critic backpropagates the sum of its first output (the value estimate), a scalar
import torch
import torch.nn as nn

captured = {}


def save_input(layer, inputs, output):
    captured[id(layer)] = inputs[0].detach()


model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
for layer in model.modules():
    if isinstance(layer, nn.Linear):
        layer.register_forward_hook(save_input)
output = model(torch.randn(32, 8))
output[:, 0].sum().backward()
print(len(captured))
