# expect: clean
# shape: style-transfer features: the layer's weight and bias are replaced by parameters that do
# not require grad, so the target computed before the loop has no graph to free
import torch
import torch.nn as nn

torch.manual_seed(0)
conv = nn.Conv1d(1, 4, 3)
conv.weight = nn.Parameter(torch.randn(4, 1, 3), requires_grad=False)
conv.bias = nn.Parameter(torch.zeros(4), requires_grad=False)
target = conv(torch.randn(1, 1, 16))
image = torch.randn(1, 1, 16, requires_grad=True)
opt = torch.optim.Adam([image], lr=0.01)
for step in range(3):
    loss = (conv(image) - target).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
