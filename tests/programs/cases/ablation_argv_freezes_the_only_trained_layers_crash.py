# expect: no_grad_fn
# shape: an ablation run parses a written-out argument list (parse_args(["--freeze", "--head", "none"])): the backbone is frozen and no head is added, so the loss has no graph
import argparse

import torch
import torch.nn as nn


def get_parser():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--freeze", action="store_true")
    parser.add_argument("--head", type=str, default="linear", choices=["linear", "none"])
    parser.add_argument("--epochs", type=int, default=1)
    return parser


class Model(nn.Module):
    def __init__(self, opt):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        if opt.freeze:
            for p in self.backbone.parameters():
                p.requires_grad = False
        self.head = nn.Linear(16, 1) if opt.head == "linear" else nn.Identity()

    def forward(self, x):
        return self.head(self.backbone(x)).mean(-1)


opt = get_parser().parse_args(["--freeze", "--head", "none", "--epochs=2"])
model = Model(opt)
optimizer = torch.optim.SGD(model.parameters(), lr=opt.lr)
for epoch in range(opt.epochs):
    loss = (model(torch.randn(4, 8)) - 1).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()  # raises
    optimizer.step()
