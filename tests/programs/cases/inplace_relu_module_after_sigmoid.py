# expect: inplace_version
# shape: nn.ReLU(inplace=True) right after nn.Sigmoid() in a Sequential overwrites the output sigmoid saved
import torch
import torch.nn as nn

net = nn.Sequential(nn.Linear(4, 4), nn.Sigmoid(), nn.ReLU(inplace=True), nn.Linear(4, 1))
loss = net(torch.randn(3, 4)).mean()
loss.backward()  # raises
