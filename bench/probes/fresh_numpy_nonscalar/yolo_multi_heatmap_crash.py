# expect: numpy_requires_grad
# source: https://github.com/XiaMooo/Yolo-Detect-Layer-Visualization/issues/1
import math

import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)

SHADES = " .:-=+*#%@"


def text_heatmap(array, title=""):
    a = (array - array.min()) / (array.max() - array.min() + 1e-9)
    rows = ["".join(SHADES[int(v * (len(SHADES) - 1))] for v in r) for r in a]
    print(title.center(array.shape[1]))
    print("\n".join(rows))


def plot_multi_heatmap(*arrays, cmap='viridis', title=None, row=None, col=None):
    n = len(arrays)
    if row is None and col is None:
        col = math.ceil(math.sqrt(n))
        row = math.ceil(n / col)
    elif row is None:
        row = math.ceil(n / col)
    elif col is None:
        col = math.ceil(n / row)
    for i, array in enumerate(arrays):
        if isinstance(array, torch.Tensor):
            array = array.cpu().numpy()  # raises
        r = i // col
        c = i % col
        text_heatmap(array, title="%s [%d,%d] %s" % (title or "", r, c, cmap))


class Detect(nn.Module):
    def __init__(self, nc=3, ch=(16, 32, 64), na=3):
        super().__init__()
        self.nc, self.na, self.no = nc, na, nc + 5
        self.m = nn.ModuleList(nn.Conv2d(x, self.no * self.na, 1) for x in ch)

    def forward(self, xs):
        out = []
        for i, x in enumerate(xs):
            p = self.m[i](x)
            bs, _, ny, nx = p.shape
            p = p.view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2)
            out.append(p.sigmoid())
        return out


detect = Detect()
feats = [torch.randn(1, 16, 20, 20), torch.randn(1, 32, 10, 10), torch.randn(1, 64, 5, 5)]
preds = detect(feats)

heatmaps = []
for p in preds:
    obj = p[0, :, :, :, 4]
    cls_conf = p[0, :, :, :, 5:].max(-1)[0]
    heatmaps.append((obj * cls_conf).max(0)[0])

plot_multi_heatmap(*heatmaps, cmap='jet', title='P3-P5', row=1, col=3)
