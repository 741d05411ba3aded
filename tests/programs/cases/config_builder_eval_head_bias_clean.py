# expect: clean
# shape: the head's bias is initialised through `.data`, outside autograd, as YOLOv5 does
import torch
import torch.nn as nn


class Conv(nn.Module):
    def __init__(self, c1, c2):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, 3, padding=1)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.conv(x))


class Detect(nn.Module):
    def __init__(self, nc, na, ch):
        super().__init__()
        self.nc, self.na = nc, na
        self.m = nn.ModuleList([nn.Conv2d(ch, na * (nc + 5), 1)])

    def forward(self, x):
        return [m(x) for m in self.m]


def parse_model(cfg, ch=3):
    layers = []
    for name, args in cfg:
        m = eval(name) if isinstance(name, str) else name
        layers.append(m(ch, *args) if m is Conv else m(args[0], args[1], ch))
        ch = args[0] if m is Conv else ch
    return nn.Sequential(*layers)


class Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.model = parse_model(cfg)
        self._initialize_biases()

    def _initialize_biases(self):
        m = self.model[-1]
        for mi in m.m:
            b = mi.bias.data.view(m.na, -1)
            b[:, 4] += -4.6
            b[:, 5:] += -2.2

    def forward(self, x):
        return self.model(x)


model = Model([["Conv", [16]], ["Conv", [32]], ["Detect", [3, 2]]])
print([o.shape for o in model(torch.randn(1, 3, 16, 16))])
