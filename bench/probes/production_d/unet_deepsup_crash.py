# expect: no_grad_fn
# source: https://github.com/qubvel-org/segmentation_models.pytorch/pull/611
"""Binary segmentation with a small U-Net and deep supervision.

Every decoder stage gets a 1x1 auxiliary head; the auxiliary predictions are
supervised with down-sampled masks and combined with decaying weights.  Losses
and metrics follow the `segmentation_models_pytorch.utils` interfaces.
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

CFG = {
    "model": {"in_channels": 1, "base": 8, "depth": 2, "deep_supervision": True},
    "loss": {"name": "dice_loss", "params": {"eps": 1.0, "beta": 1.0, "activation": "sigmoid", "threshold": 0.5}},
    "metrics": [{"name": "iou_score", "params": {"threshold": 0.5, "activation": "sigmoid"}}],
    "ds_weights": [1.0, 0.5],
    "optim": {"lr": 1e-3, "weight_decay": 1e-5},
    "data": {"n": 8, "size": 16, "batch_size": 4},
    "epochs": 2,
}


# ---------------------------------------------------------------- functional
def _take_channels(*xs, ignore_channels=None):
    if ignore_channels is None:
        return xs
    channels = [c for c in range(xs[0].shape[1]) if c not in ignore_channels]
    return [torch.index_select(x, dim=1, index=torch.tensor(channels)) for x in xs]


def _threshold(x, threshold=None):
    if threshold is not None:
        return (x > threshold).type(x.dtype)
    return x


def f_score(pr, gt, beta=1, eps=1e-7, threshold=None, ignore_channels=None):
    pr = _threshold(pr, threshold=threshold)
    pr, gt = _take_channels(pr, gt, ignore_channels=ignore_channels)
    tp = torch.sum(gt * pr)
    fp = torch.sum(pr) - tp
    fn = torch.sum(gt) - tp
    return ((1 + beta ** 2) * tp + eps) / ((1 + beta ** 2) * tp + beta ** 2 * fn + fp + eps)


def iou(pr, gt, eps=1e-7, threshold=None, ignore_channels=None):
    pr = _threshold(pr, threshold=threshold)
    pr, gt = _take_channels(pr, gt, ignore_channels=ignore_channels)
    intersection = torch.sum(gt * pr)
    union = torch.sum(gt) + torch.sum(pr) - intersection + eps
    return (intersection + eps) / union


# ------------------------------------------------------------ losses/metrics
class Activation(nn.Module):
    def __init__(self, name):
        super().__init__()
        self.fn = {None: lambda x: x, "sigmoid": torch.sigmoid}[name]

    def forward(self, x):
        return self.fn(x)


class DiceLoss(nn.Module):
    __name__ = "dice_loss"

    def __init__(self, eps=1.0, beta=1.0, activation=None, threshold=None, ignore_channels=None):
        super().__init__()
        self.eps, self.beta, self.threshold = eps, beta, threshold
        self.activation = Activation(activation)
        self.ignore_channels = ignore_channels

    def forward(self, y_pr, y_gt):
        y_pr = self.activation(y_pr)
        return 1 - f_score(y_pr, y_gt, beta=self.beta, eps=self.eps,
                           threshold=self.threshold, ignore_channels=self.ignore_channels)


class IoU(nn.Module):
    __name__ = "iou_score"

    def __init__(self, threshold=0.5, activation=None):
        super().__init__()
        self.threshold = threshold
        self.activation = Activation(activation)

    def forward(self, y_pr, y_gt):
        return iou(self.activation(y_pr), y_gt, threshold=self.threshold)


REGISTRY = {"dice_loss": DiceLoss, "iou_score": IoU}


def build(spec):
    return REGISTRY[spec["name"]](**spec["params"])


# ---------------------------------------------------------------------- model
def conv_block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                         nn.Conv2d(cout, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class UNet(nn.Module):
    def __init__(self, in_channels, base, depth, deep_supervision):
        super().__init__()
        chs = [base * 2 ** i for i in range(depth + 1)]
        self.enc = nn.ModuleList([conv_block(in_channels, chs[0])] +
                                 [conv_block(chs[i], chs[i + 1]) for i in range(depth)])
        self.up = nn.ModuleList([nn.ConvTranspose2d(chs[i + 1], chs[i], 2, stride=2) for i in reversed(range(depth))])
        self.dec = nn.ModuleList([conv_block(2 * chs[i], chs[i]) for i in reversed(range(depth))])
        self.heads = nn.ModuleList([nn.Conv2d(chs[i], 1, 1) for i in reversed(range(depth))])
        self.deep_supervision = deep_supervision

    def forward(self, x):
        skips = []
        for i, block in enumerate(self.enc):
            x = block(x if i == 0 else F.max_pool2d(x, 2))
            skips.append(x)
        x = skips.pop()
        outputs = []
        for up, dec, head in zip(self.up, self.dec, self.heads):
            x = dec(torch.cat([up(x), skips.pop()], dim=1))
            outputs.append(head(x))
        if self.deep_supervision and self.training:
            return outputs[::-1]  # full resolution first
        return outputs[-1]


# --------------------------------------------------------------------- runner
class TrainEpoch:
    def __init__(self, model, loss, metrics, optimizer, ds_weights, verbose=True):
        self.model, self.loss, self.metrics = model, loss, metrics
        self.optimizer, self.ds_weights, self.verbose = optimizer, ds_weights, verbose

    def deep_supervision_loss(self, outputs, y):
        total = 0.0
        for w, out in zip(self.ds_weights, outputs):
            target = F.interpolate(y, size=out.shape[-2:], mode="nearest")
            total = total + w * self.loss(out, target)
        return total / sum(self.ds_weights[:len(outputs)])

    def batch_update(self, x, y):
        self.optimizer.zero_grad()
        outputs = self.model.forward(x)
        loss = self.deep_supervision_loss(outputs, y)
        loss.backward()  # raises
        self.optimizer.step()
        return loss, outputs[0]

    def run(self, batches):
        self.model.train()
        logs = {self.loss.__name__: 0.0, **{m.__name__: 0.0 for m in self.metrics}}
        for x, y in batches:
            loss, pred = self.batch_update(x, y)
            logs[self.loss.__name__] += loss.item() / len(batches)
            for m in self.metrics:
                logs[m.__name__] += m(pred.detach(), y).item() / len(batches)
        if self.verbose:
            print(", ".join(f"{k} - {v:.4f}" for k, v in logs.items()), file=sys.stdout)
        return logs


def make_batches(n, size, batch_size, seed=0):
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    batches = []
    for start in range(0, n, batch_size):
        cx = torch.randint(4, size - 4, (batch_size, 1, 1), generator=g)
        cy = torch.randint(4, size - 4, (batch_size, 1, 1), generator=g)
        masks = (((xx - cx) ** 2 + (yy - cy) ** 2) < 9).float().unsqueeze(1)
        images = masks + 0.3 * torch.randn(masks.shape, generator=g)
        batches.append((images, masks))
    return batches


def main(cfg=CFG):
    torch.manual_seed(0)
    model = UNet(**cfg["model"])
    loss = build(cfg["loss"])
    metrics = [build(m) for m in cfg["metrics"]]
    optimizer = torch.optim.Adam(model.parameters(), **cfg["optim"])
    runner = TrainEpoch(model, loss, metrics, optimizer, cfg["ds_weights"])
    batches = make_batches(**cfg["data"])
    for epoch in range(cfg["epochs"]):
        print(f"\nEpoch: {epoch}")
        runner.run(batches)


if __name__ == "__main__":
    main()
