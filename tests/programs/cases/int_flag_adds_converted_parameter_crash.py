# expect: nonleaf_optimizer
# shape: an `--learnable_rotation` option (type=int, default 1) is passed as `bool(args.learnable_rotation)`; the model then adds a rotation made as `nn.Parameter(...).to(dtype=torch.float64)`, a converted copy that is not a leaf, to its optimizer groups
import argparse

import torch
import torch.nn as nn


class Field(nn.Module):
    def __init__(self, learnable_rotation=False):
        super().__init__()
        self.grid = nn.Parameter(torch.zeros(8, 3))
        self.learnable_rotation = learnable_rotation
        if learnable_rotation:
            self.angleaxis = nn.Parameter(torch.zeros(3)).to(dtype=torch.float64)

    def param_groups(self, lr):
        groups = [{"params": [self.grid], "lr": lr}]
        if self.learnable_rotation:
            groups += [{"params": [self.angleaxis], "lr": lr * 0.1}]
        return groups


parser = argparse.ArgumentParser()
parser.add_argument("--learnable_rotation", type=int, default=1)
parser.add_argument("--lr", type=float, default=0.02)
args = parser.parse_args([])
field = Field(learnable_rotation=bool(args.learnable_rotation))
optimizer = torch.optim.Adam(field.param_groups(args.lr))  # raises
