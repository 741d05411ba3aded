# expect: clean
# shape: Cfg(*extra, False) with extra not known: which field gets False is not known
import json
from dataclasses import dataclass

import torch


@dataclass
class Cfg:
    freeze: bool = False
    train: bool = True


extra = json.loads("[]")        # not known to the analyser: here empty
cfg = Cfg(*extra, False)        # freeze=False, train=True
w = torch.zeros(3, requires_grad=cfg.train)
(w * 2).sum().backward()
print(cfg)
