# expect: inplace_version
# shape: thresholding the output of sigmoid with an in-place masked assignment
import torch
import torch.nn as nn

net = nn.Linear(4, 4)
probs = torch.sigmoid(net(torch.randn(3, 4)))
probs[probs < 0.1] = 0.0
probs.sum().backward()  # raises
