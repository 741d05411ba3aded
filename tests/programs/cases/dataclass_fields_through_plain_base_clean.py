# expect: clean
# shape: a dataclass inherits the fields of a dataclass behind a plain class: Cfg(False) sets freeze,
# not train
from dataclasses import dataclass

import torch


@dataclass
class Base:
    freeze: bool = False


class Mid(Base):      # not decorated: it inherits Base's fields and __init__
    pass


@dataclass
class Cfg(Mid):
    train: bool = True


cfg = Cfg(False)      # freeze=False, train=True
w = torch.zeros(3, requires_grad=cfg.train)
(w * 2).sum().backward()
print(cfg)
