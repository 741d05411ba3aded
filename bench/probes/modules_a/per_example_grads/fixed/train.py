# expect: clean
# source: https://github.com/cybertronai/autograd-hacks/issues/8
"""Per-example gradients with autograd_hacks for a small two-headed MLP
(predicted value and log-variance) on a synthetic tabular regression batch;
only the gradient of the first output unit is wanted, and the per-example
gradient norms are printed to spot outlying samples."""
import torch
import torch.nn as nn

from autograd_hacks import add_hooks, compute_grad1

torch.manual_seed(0)
n, d = 32, 8
x = torch.randn(n, d)
x[3] *= 10.0  # one outlying sample

model = nn.Sequential(nn.Linear(d, 16), nn.Tanh(), nn.Linear(16, 2))
add_hooks(model)

output = model(x)
output[:, 0].sum().backward()
compute_grad1(model, loss_type='sum')

norms = torch.zeros(n)
for param in model.parameters():
    norms += param.grad1.flatten(1).pow(2).sum(1)
norms = norms.sqrt()
print("per-example grad norms:", [round(v, 3) for v in norms.tolist()[:8]])
print("largest:", norms.argmax().item())
