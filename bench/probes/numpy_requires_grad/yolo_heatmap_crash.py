# expect: numpy_requires_grad
# source: https://github.com/XiaMooo/Yolo-Detect-Layer-Visualization/issues/1
import math

import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)


class DetectHeads(nn.Module):
    """Three detection heads on feature maps of different strides (YOLO-style)."""

    def __init__(self, channels=(16, 32, 64), num_anchors=3, num_outputs=6):
        super().__init__()
        self.no = num_outputs
        self.na = num_anchors
        self.m = nn.ModuleList(nn.Conv2d(c, num_anchors * num_outputs, 1) for c in channels)

    def forward(self, feats):
        outs = []
        for conv, f in zip(self.m, feats):
            bs, _, ny, nx = f.shape
            y = conv(f).view(bs, self.na, self.no, ny, nx)
            outs.append(y[:, :, 4].sigmoid().amax(dim=1)[0])  # objectness map
        return outs


def plot_multi_heatmap(*arrays, title=None, row=None, col=None):
    col = col or len(arrays)
    row = row or math.ceil(len(arrays) / col)
    grid = {}
    for i, array in enumerate(arrays):
        if isinstance(array, torch.Tensor):
            array = array.cpu().numpy()  # raises
        r, c = i // col, i % col
        lo, hi = array.min(), array.max()
        grid[(r, c)] = ((array - lo) / (hi - lo + 1e-8) * 255).astype(np.uint8)
    if title:
        print(title)
    for (r, c), img in grid.items():
        print(f"  panel[{r},{c}] shape={img.shape} mean={img.mean():.1f}")
    return grid


heads = DetectHeads()
features = [torch.randn(1, 16, 20, 20), torch.randn(1, 32, 10, 10), torch.randn(1, 64, 5, 5)]
obj_maps = heads(features)
plot_multi_heatmap(*obj_maps, title="objectness P3/P4/P5", row=1)
