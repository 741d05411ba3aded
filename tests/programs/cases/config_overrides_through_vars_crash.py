# expect: no_grad_fn
# shape: the twin of config_overrides_through_vars_clean.py whose settings are read from `vars(args)`, a dict of the namespace's attributes: the default freezes the model, no override changes it, and the loss has no graph
import argparse

import torch
from torch import nn


def get_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--freeze_backbone", type=int, default=1)
    parser.add_argument("--lr", type=float, default=0.1)
    return parser.parse_args([])


def build(config):
    model = nn.Sequential(nn.Linear(5, 5), nn.ReLU(), nn.Linear(5, 2))
    if config["freeze_backbone"]:
        model.requires_grad_(False)
    return model


config = vars(get_args())
model = build(config)
x, y = torch.randn(4, 5), torch.randint(0, 2, (4,))
loss = nn.functional.cross_entropy(model(x), y)
loss.backward()  # raises
