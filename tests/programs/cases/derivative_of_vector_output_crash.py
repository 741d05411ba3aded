# expect: nonscalar_backward
# shape: the derivative of a network's output by its input points, asked of autograd.grad without grad_outputs for a batch of outputs
import torch
import torch.nn as nn

net = nn.Sequential(nn.Linear(1, 16), nn.Tanh(), nn.Linear(16, 1))
points = torch.rand(50, 1, requires_grad=True)
u = net(points)
du, = torch.autograd.grad(u, points, create_graph=True)  # raises
loss = (du - torch.cos(points)).pow(2).mean()
loss.backward()
