# expect: inplace_version
# shape: in a function, features computed once before the loop by a backbone, and two optimizers stepped by a list comprehension (`[opt.step() for opt in (opt_backbone, opt_head)]`): the backbone's step changes the weights the kept graph saved, so the second iteration's backward raises
import torch
import torch.nn as nn


def train():
    backbone = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 16))
    head = nn.Linear(16, 4)
    opt_backbone = torch.optim.Adam(backbone.parameters(), lr=1e-3)
    opt_head = torch.optim.Adam(head.parameters(), lr=1e-3)
    features = backbone(torch.randn(4, 8))
    for step in range(2):
        loss = head(features).pow(2).mean()
        [opt.zero_grad() for opt in (opt_backbone, opt_head)]
        loss.backward(retain_graph=True)  # raises
        [opt.step() for opt in (opt_backbone, opt_head)]


train()
