# expect: clean
# shape: a transposed convolution given output_size returns that size, not the formula's
import torch
import torch.nn as nn

up = nn.ConvTranspose2d(4, 4, 3, stride=2, padding=1)
y = up(torch.randn(1, 4, 5, 5), output_size=(10, 10))   # (1, 4, 10, 10), not the formula's 9
z = torch.randn(11 - y.shape[-1], requires_grad=True)   # one element
(z * 2).backward()
