# expect: clean
# shape: MaxPool2d of an unbatched (C, H, W) input pools H and W, not C and H
import torch
import torch.nn as nn

pool = nn.MaxPool2d(2)
y = pool(torch.randn(3, 8, 8))      # unbatched (C, H, W): (3, 4, 4)
z = torch.randn(y.shape[1] - 3, requires_grad=True)   # one element
(z * 2).backward()
