# expect: no_grad_fn
# shape: a loss computed on a thresholded mask of the model's probabilities
import torch
import torch.nn as nn
import torch.nn.functional as F

net = nn.Linear(8, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
x, target = torch.randn(16, 8), (torch.rand(16, 1) > 0.5).float()
for step in range(2):
    prob = torch.sigmoid(net(x))
    hard = (prob > 0.5).float()
    loss = F.binary_cross_entropy(hard, target)
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
