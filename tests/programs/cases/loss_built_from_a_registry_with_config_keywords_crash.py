# expect: no_grad_fn
# shape: a loss built by `LOSSES[name](**spec['params'])` from a nested config that sets `threshold`: the loss binarises its predictions and has no graph (the target is resized with `size=out.shape[-2:]`, numbers only)
import torch
import torch.nn as nn
import torch.nn.functional as F

CFG = {"loss": {"name": "dice", "params": {"eps": 1.0, "threshold": 0.5}}, "lr": 1e-2}


def _threshold(x, threshold=None):
    if threshold is not None:
        return (x > threshold).type(x.dtype)
    return x


class DiceLoss(nn.Module):
    def __init__(self, eps=1.0, threshold=None):
        super().__init__()
        self.eps, self.threshold = eps, threshold

    def forward(self, pred, target):
        pred = _threshold(torch.sigmoid(pred), threshold=self.threshold)
        inter = (pred * target).sum()
        return 1 - (2 * inter + self.eps) / (pred.sum() + target.sum() + self.eps)


LOSSES = {"dice": DiceLoss}


def build(spec):
    return LOSSES[spec["name"]](**spec["params"])


def main(cfg=CFG):
    net = nn.Conv2d(1, 1, 3, padding=1)
    loss_fn = build(cfg["loss"])
    opt = torch.optim.Adam(net.parameters(), lr=cfg["lr"])
    x, y = torch.randn(2, 1, 8, 8), (torch.rand(2, 1, 16, 16) > 0.5).float()
    out = net(x)
    loss = loss_fn(out, F.interpolate(y, size=out.shape[-2:], mode="nearest"))
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()


main()
