# expect: clean
# shape: a thresholded mask used only for a metric; the loss uses the probabilities
import torch
import torch.nn as nn
import torch.nn.functional as F

net = nn.Linear(8, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
x, target = torch.randn(16, 8), (torch.rand(16, 1) > 0.5).float()
for step in range(2):
    prob = torch.sigmoid(net(x))
    hard = (prob > 0.5).float()
    loss = F.binary_cross_entropy(prob, target)
    accuracy = (hard == target).float().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
