# expect: clean
# shape: the meta gradients keep their graph (create_graph=True), so the validation loss depends on eps through them
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call

torch.manual_seed(0)
net = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 2))
names = [n for n, _ in net.named_parameters()]
x, y = torch.randn(32, 20), torch.randint(0, 2, (32,))
val_x, val_y = torch.randn(16, 20), torch.randint(0, 2, (16,))

params = [p.detach().clone().requires_grad_(True) for p in net.parameters()]
cost = F.cross_entropy(functional_call(net, dict(zip(names, params)), (x,)), y, reduction="none")
eps = torch.zeros(cost.size(), requires_grad=True)
grads = torch.autograd.grad(torch.sum(cost * eps), params, create_graph=True)
new_params = [p - 0.01 * g for p, g in zip(params, grads)]
val_loss = F.cross_entropy(functional_call(net, dict(zip(names, new_params)), (val_x,)), val_y)
grad_eps = torch.autograd.grad(val_loss, eps)[0]
