# expect: clean
# shape: a script whose argparse defaults freeze the backbone, overridden by a dict of experiment settings written through `vars(args).update(...)`: the override reaches `args`, the backbone stays trainable and the loss has a graph
import argparse

import torch
from torch import nn

EXPERIMENTS = {"finetune": {"freeze_backbone": 0, "lr": 0.01}}


def get_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--freeze_backbone", type=int, default=1)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--experiment", default="finetune")
    args = parser.parse_args([])
    vars(args).update(EXPERIMENTS[args.experiment])
    return args


def build(args):
    model = nn.Sequential(nn.Linear(5, 5), nn.ReLU(), nn.Linear(5, 2))
    if args.freeze_backbone:
        model.requires_grad_(False)
    return model


args = get_args()
model = build(args)
x, y = torch.randn(4, 5), torch.randint(0, 2, (4,))
loss = nn.functional.cross_entropy(model(x), y)
loss.backward()
