# expect: clean
# shape: AvgPool2d(2, 2, 0, True) rounds its output size up (ceil_mode given by position): 3x3 gives
# 2x2
import torch
import torch.nn as nn

pool = nn.AvgPool2d(2, 2, 0, True)          # ceil_mode=True, positional
y = pool(torch.randn(1, 1, 3, 3))           # (1, 1, 2, 2)
z = torch.randn(3 - y.shape[-1], requires_grad=True)   # one element
(z * 2).backward()
