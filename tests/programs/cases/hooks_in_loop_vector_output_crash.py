# expect: nonscalar_backward
# shape: per-example gradient hooks are registered in a loop over model.modules() on every Linear layer (each hook returns None, leaving the output as it is); the critic's output has three values per sample and is backpropagated with no gradient given
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
output.backward()  # raises
print(len(captured))
