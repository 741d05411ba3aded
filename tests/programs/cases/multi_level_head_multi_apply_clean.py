# expect: clean
# shape: the twin of multi_level_head_multi_apply_crash.py whose second ReLU is not in place (`F.relu(h, inplace=False)`): what the first ReLU saved is left as it was
from collections import OrderedDict
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F


def multi_apply(func, *args, **kwargs):
    pfunc = partial(func, **kwargs) if kwargs else func
    map_results = map(pfunc, *args)
    return tuple(map(list, zip(*map_results)))


class Head(nn.Module):
    def __init__(self, c=4, classes=2):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.cls = nn.Conv2d(c, classes, 1)

    def forward_single(self, x):
        h = torch.relu(self.conv(x))
        h = F.relu(h, inplace=False)
        return self.cls(h), h.mean()

    def forward(self, feats):
        return multi_apply(self.forward_single, feats)


head = Head()
opt = torch.optim.SGD(head.parameters(), lr=0.01)
feats = [torch.randn(2, 4, 8, 8), torch.randn(2, 4, 4, 4)]
scores, means = head(feats)
losses = OrderedDict()
losses["loss_cls"] = sum(s.pow(2).mean() for s in scores)
losses["loss_reg"] = sum(means)
loss = sum(v for v in losses.values())
loss.backward()
opt.step()
