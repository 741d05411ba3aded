# expect: no_grad_fn
# shape: a second derivative taken from a first one computed without create_graph
import torch
import torch.nn as nn

net = nn.Sequential(nn.Linear(1, 16), nn.Tanh(), nn.Linear(16, 1))
x = torch.rand(32, 1, requires_grad=True)
u = net(x)
u_x = torch.autograd.grad(u, x, torch.ones_like(u))[0]
u_xx = torch.autograd.grad(u_x, x, torch.ones_like(u_x))[0]  # raises
loss = (u_xx + u).pow(2).mean()
loss.backward()
