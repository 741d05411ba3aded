# expect: nonscalar_backward
# source: https://github.com/PRBonn/LiDAR-MOS/issues/56
"""LiDAR moving-object segmentation trainer (SalsaNext-style range-image network
with weighted NLL + Lovasz-Softmax loss) on a custom synthetic dataset whose
scans may contain only unlabeled points."""
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Variable

try:
    from itertools import ifilterfalse
except ImportError:
    from itertools import filterfalse as ifilterfalse

ARCH = {"train": {"max_epochs": 1, "lr": 0.01, "momentum": 0.9, "w_decay": 1e-4, "batch_size": 2,
                  "epsilon_w": 0.001, "report_batch": 1},
        "dataset": {"sensor": {"img_prop": {"height": 16, "width": 64}}, "n_input_scans": 2}}
DATA = {"content": {0: 0.05, 9: 0.9, 251: 0.05},
        "learning_map": {0: 0, 9: 1, 251: 2},
        "learning_ignore": {0: True, 1: False, 2: False}}


def isnan(x):
    return x != x


def mean(l, ignore_nan=False, empty=0):
    l = iter(l)
    if ignore_nan:
        l = ifilterfalse(isnan, l)
    try:
        n = 1
        acc = next(l)
    except StopIteration:
        return empty
    for n, v in enumerate(l, 2):
        acc += v
    return acc if n == 1 else acc / n


def lovasz_grad(gt_sorted):
    p = len(gt_sorted)
    gts = gt_sorted.sum()
    intersection = gts - gt_sorted.float().cumsum(0)
    union = gts + (1 - gt_sorted).float().cumsum(0)
    jaccard = 1. - intersection / union
    if p > 1:
        jaccard[1:p] = jaccard[1:p] - jaccard[0:-1]
    return jaccard


def lovasz_softmax_flat(probas, labels, classes='present'):
    if probas.numel() == 0:
        # only void pixels, the gradients should be 0
        return probas * 0.
    C = probas.size(1)
    losses = []
    for c in list(range(C)):
        fg = (labels == c).float()
        if classes == 'present' and fg.sum() == 0:
            continue
        errors = (Variable(fg) - probas[:, c]).abs()
        errors_sorted, perm = torch.sort(errors, 0, descending=True)
        losses.append(torch.dot(errors_sorted, Variable(lovasz_grad(fg[perm.data]))))
    return mean(losses)


def flatten_probas(probas, labels, ignore=None):
    B, C, H, W = probas.size()
    probas = probas.permute(0, 2, 3, 1).contiguous().view(-1, C)
    labels = labels.view(-1)
    if ignore is None:
        return probas, labels
    valid = (labels != ignore)
    return probas[valid.nonzero().squeeze()], labels[valid]


class Lovasz_softmax(nn.Module):
    def __init__(self, classes='present', per_image=False, ignore=None):
        super().__init__()
        self.classes, self.per_image, self.ignore = classes, per_image, ignore

    def forward(self, probas, labels):
        return lovasz_softmax_flat(*flatten_probas(probas, labels, self.ignore), classes=self.classes)


class ResBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(cin, cout, 1), nn.Conv2d(cout, cout, 3, padding=1)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        shortcut = F.leaky_relu(self.conv1(x))
        return F.leaky_relu(self.bn(self.conv2(shortcut))) + shortcut


class SalsaNext(nn.Module):
    def __init__(self, nclasses, n_input_scans):
        super().__init__()
        self.down = nn.Sequential(ResBlock(5 * n_input_scans, 16), nn.AvgPool2d(2), ResBlock(16, 32))
        self.up = nn.Sequential(nn.Upsample(scale_factor=2), ResBlock(32, 16))
        self.logits = nn.Conv2d(16, nclasses, 1)

    def forward(self, x):
        return F.softmax(self.logits(self.up(self.down(x))), dim=1)


class SyntheticScanParser:
    """Yields (proj_in, proj_mask, proj_labels) batches; the last two scans have no annotated points."""

    def __init__(self, n_scans, batch_size, H, W, n_input_scans, seed=0):
        rng = np.random.RandomState(seed)
        self.inputs = torch.from_numpy(rng.randn(n_scans, 5 * n_input_scans, H, W).astype(np.float32))
        labels = rng.choice([0, 1, 2], size=(n_scans, H, W), p=[0.2, 0.7, 0.1])
        labels[-2:] = 0
        self.labels = torch.from_numpy(labels).long()
        self.batch_size = batch_size

    def get_train_set(self):
        for i in range(0, len(self.inputs), self.batch_size):
            lab = self.labels[i:i + self.batch_size]
            yield self.inputs[i:i + self.batch_size], (lab != 0).float(), lab


class AverageMeter:
    def __init__(self):
        self.val = self.avg = self.sum = self.count = 0

    def update(self, val, n=1):
        self.val, self.sum, self.count = val, self.sum + val * n, self.count + n
        self.avg = self.sum / self.count


class iouEval:
    def __init__(self, n_classes, ignore):
        self.n_classes, self.ignore = n_classes, torch.tensor(ignore).long()
        self.include = torch.tensor([n for n in range(n_classes) if n not in ignore]).long()
        self.conf = torch.zeros((n_classes, n_classes)).long()

    def addBatch(self, x, y):
        idx = torch.stack([x.reshape(-1), y.reshape(-1)], dim=0)
        self.conf = self.conf.index_put_(tuple(idx), torch.ones(idx.shape[-1]).long(), accumulate=True)

    def getIoU(self):
        conf = self.conf.clone().double()
        conf[self.ignore] = 0
        conf[:, self.ignore] = 0
        tp = conf.diag()
        iou = tp / (tp + conf.sum(dim=1) - tp + conf.sum(dim=0) - tp + 1e-15)
        return iou[self.include].mean(), iou


class Trainer:
    def __init__(self, ARCH, DATA):
        self.ARCH, self.DATA = ARCH, DATA
        n_cls = len(DATA["learning_map"].values())
        content = torch.zeros(n_cls, dtype=torch.float)
        for cl, freq in DATA["content"].items():
            content[DATA["learning_map"][cl]] += freq
        self.loss_w = 1 / (content + ARCH["train"]["epsilon_w"])
        for x_cl, w in DATA["learning_ignore"].items():
            if w:
                self.loss_w[x_cl] = 0
        print("Loss weights from content: ", self.loss_w.data)
        self.ignore_class = [cl for cl, ign in DATA["learning_ignore"].items() if ign]
        self.model = SalsaNext(n_cls, ARCH["dataset"]["n_input_scans"])
        self.criterion = nn.NLLLoss(weight=self.loss_w)
        self.ls = Lovasz_softmax(ignore=0)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=ARCH["train"]["lr"],
                                         momentum=ARCH["train"]["momentum"], weight_decay=ARCH["train"]["w_decay"])
        img = ARCH["dataset"]["sensor"]["img_prop"]
        self.parser = SyntheticScanParser(6, ARCH["train"]["batch_size"], img["height"], img["width"],
                                          ARCH["dataset"]["n_input_scans"])
        self.evaluator = iouEval(n_cls, self.ignore_class)

    def train_epoch(self, epoch):
        losses, acc, iou, batch_time = AverageMeter(), AverageMeter(), AverageMeter(), AverageMeter()
        self.model.train()
        end = time.time()
        for i, (in_vol, proj_mask, proj_labels) in enumerate(self.parser.get_train_set()):
            output = self.model(in_vol)
            loss_m = self.criterion(torch.log(output.clamp(min=1e-8)), proj_labels) + self.ls(output, proj_labels.long())
            self.optimizer.zero_grad()
            loss_m.backward()  # raises
            self.optimizer.step()
            loss = loss_m.mean()
            with torch.no_grad():
                self.evaluator.conf.zero_()
                argmax = output.argmax(dim=1)
                self.evaluator.addBatch(argmax, proj_labels)
                accuracy = (argmax == proj_labels)[proj_mask.bool()].float().mean() if proj_mask.any() else torch.tensor(0.)
                jaccard, _ = self.evaluator.getIoU()
            losses.update(loss.item(), in_vol.size(0))
            acc.update(accuracy.item(), in_vol.size(0))
            iou.update(jaccard.item(), in_vol.size(0))
            batch_time.update(time.time() - end)
            end = time.time()
            if i % self.ARCH["train"]["report_batch"] == 0:
                print(f"Epoch: [{epoch}][{i}] | Loss {losses.val:.4f} ({losses.avg:.4f}) | acc {acc.val:.3f} | IoU {iou.val:.3f}")
        return acc.avg, iou.avg, losses.avg

    def train(self):
        for epoch in range(self.ARCH["train"]["max_epochs"]):
            acc, iou, loss = self.train_epoch(epoch)
            print(f"epoch {epoch} done: acc {acc:.3f} iou {iou:.3f} loss {loss:.4f}")


if __name__ == "__main__":
    torch.manual_seed(0)
    Trainer(ARCH, DATA).train()
