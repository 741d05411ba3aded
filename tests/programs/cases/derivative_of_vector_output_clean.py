# expect: clean
# shape: the same derivative with grad_outputs of ones: each point's own derivative
import torch
import torch.nn as nn

net = nn.Sequential(nn.Linear(1, 16), nn.Tanh(), nn.Linear(16, 1))
points = torch.rand(50, 1, requires_grad=True)
u = net(points)
du, = torch.autograd.grad(u, points, grad_outputs=torch.ones_like(u), create_graph=True)
loss = (du - torch.cos(points)).pow(2).mean()
loss.backward()
