# expect: clean
# shape: the twin of layer_class_named_by_format_crash.py that adds the residual out of place: the ReLU's saved output is unchanged
import torch
from torch import nn


class ResidualBlock(nn.Module):
    def __init__(self, channels, dims=3):
        super().__init__()
        conv_class = getattr(nn, "Conv{}d".format(dims))
        norm_class = getattr(nn, "BatchNorm" + str(dims) + "d")
        self.conv = conv_class(channels, channels, kernel_size=3, padding=1)
        self.norm = norm_class(channels)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        out = self.act(self.norm(self.conv(x)))
        out = out + x
        return out


torch.manual_seed(0)
block = ResidualBlock(2)
x = torch.randn(1, 2, 4, 4, 4)
loss = block(x).sum()
loss.backward()
