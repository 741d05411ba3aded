# expect: clean
# shape: a dataclass's generated __init__ replaces its plain base's: train is the field's default,
# True
from dataclasses import dataclass

import torch


class Base:
    def __init__(self, train=False):
        self.train = train


@dataclass
class Cfg(Base):      # the dataclass's own __init__ replaces Base's (which is not called)
    train: bool = True


cfg = Cfg()
w = torch.zeros(3, requires_grad=cfg.train)
(w * 2).sum().backward()
print(cfg)
