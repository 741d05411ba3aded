# expect: clean
# shape: the first backward keeps the graph for the penalty that follows
import functools

import torch
import torch.nn as nn


def penalty(features, weight):
    return weight * features.pow(2).mean()


torch.manual_seed(0)
encoder = nn.Linear(8, 4)
opt = torch.optim.SGD(encoder.parameters(), lr=0.1)
x = torch.randn(32, 8)
feats = encoder(x)
reg = functools.partial(penalty, feats)
main_loss = feats.abs().mean()
main_loss.backward(retain_graph=True)
reg_loss = reg(0.1)
reg_loss.backward()
opt.step()
