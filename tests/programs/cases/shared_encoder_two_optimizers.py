# expect: clean
# shape: two heads on one encoder; the first step changes encoder weights, which the encoder did not save
# (its input needs no grad, so Linear saved only the input)
import torch
import torch.nn as nn

encoder = nn.Sequential(nn.Linear(4, 8), nn.Tanh())
head_a, head_b = nn.Linear(8, 1), nn.Linear(8, 1)
opt_a = torch.optim.SGD(list(encoder.parameters()) + list(head_a.parameters()), lr=0.1)
z = encoder(torch.randn(3, 4))
loss_a = head_a(z).mean()
loss_b = head_b(z).pow(2).mean()
opt_a.zero_grad()
loss_a.backward(retain_graph=True)
opt_a.step()
loss_b.backward()
