# expect: no_grad_fn
# shape: the twin of dict_update_replaces_items_clean.py whose update changes only the width: the default still freezes the encoder, and the loss has no graph
import torch
from torch import nn

DEFAULTS = {"freeze_encoder": True, "hidden": 8}


def make_config(**overrides):
    cfg = dict(DEFAULTS)
    cfg.update(overrides)
    return cfg


cfg = make_config(hidden=16)
encoder = nn.Linear(4, cfg["hidden"])
if cfg["freeze_encoder"]:
    for p in encoder.parameters():
        p.requires_grad = False
loss = encoder(torch.randn(3, 4)).pow(2).mean()
loss.backward()  # raises
