# expect: clean
# shape: the twin of optimizers_stepped_by_a_comprehension_crash.py whose comprehension steps only the head: the backbone's weights, saved by the kept graph, stay as they were
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
        loss.backward(retain_graph=True)
        [opt.step() for opt in (opt_head,)]


train()
