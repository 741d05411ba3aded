# expect: freed_graph
# shape: style-transfer features: the layer's weight is replaced by a parameter that requires
# grad, so the target computed before the loop has a graph, freed by the first backward
import torch
import torch.nn as nn

torch.manual_seed(0)
conv = nn.Conv1d(1, 4, 3)
conv.weight = nn.Parameter(torch.randn(4, 1, 3))
conv.bias = nn.Parameter(torch.zeros(4))
target = conv(torch.randn(1, 1, 16))
image = torch.randn(1, 1, 16, requires_grad=True)
opt = torch.optim.Adam([image], lr=0.01)
for step in range(3):
    loss = (conv(image) - target).pow(2).mean()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
