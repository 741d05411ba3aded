# expect: clean
# shape: a default config dict updated with the run's settings (`cfg.update(overrides)`), which unfreeze the encoder: `update` replaces the items under the keys it is given, and the loss has a graph
import torch
from torch import nn

DEFAULTS = {"freeze_encoder": True, "hidden": 8}


def make_config(**overrides):
    cfg = dict(DEFAULTS)
    cfg.update(overrides)
    return cfg


cfg = make_config(freeze_encoder=False)
encoder = nn.Linear(4, cfg["hidden"])
if cfg["freeze_encoder"]:
    for p in encoder.parameters():
        p.requires_grad = False
loss = encoder(torch.randn(3, 4)).pow(2).mean()
loss.backward()
