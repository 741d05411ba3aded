# expect: nonscalar_backward
# source: https://github.com/huixiancheng/CENet/issues/8
"""Range-image LiDAR semantic segmentation trainer (CENet-style: CNN over
projected range images, weighted CE + Lovasz-like soft IoU + boundary aux
heads), with a data-parallel wrapper that splits the batch over replicas and
gathers per-replica outputs (CPU emulation of nn.DataParallel gather)."""
import math
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class ARCH:
    n_classes: int = 6
    in_channels: int = 5          # range, x, y, z, remission
    H: int = 16
    W: int = 64
    batch_size: int = 4
    epochs: int = 2
    iters_per_epoch: int = 3
    lr: float = 0.01
    momentum: float = 0.9
    w_decay: float = 1e-4
    n_gpus: int = 2
    aux_weight: float = 1.0
    report_batch: int = 1


class BasicConv(nn.Module):
    def __init__(self, cin, cout, k=3, d=1):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, padding=d * (k // 2), dilation=d, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        return F.leaky_relu(self.bn(self.conv(x)), 0.1)


class CENetHead(nn.Module):
    def __init__(self, cfg: ARCH):
        super().__init__()
        self.stem = nn.Sequential(BasicConv(cfg.in_channels, 16), BasicConv(16, 16, d=2))
        self.stage = nn.Sequential(BasicConv(16, 32), BasicConv(32, 32, d=2))
        self.semantic = nn.Conv2d(32, cfg.n_classes, 1)
        self.aux1 = nn.Conv2d(16, cfg.n_classes, 1)
        self.aux2 = nn.Conv2d(32, cfg.n_classes, 1)

    def forward(self, x):
        f1 = self.stem(x)
        f2 = self.stage(f1)
        return self.semantic(f2), self.aux1(f1), self.aux2(f2)


def soft_iou_loss(logits, labels, n_classes):
    probs = logits.softmax(1)
    onehot = F.one_hot(labels, n_classes).permute(0, 3, 1, 2).float()
    inter = (probs * onehot).sum((0, 2, 3))
    union = (probs + onehot - probs * onehot).sum((0, 2, 3)) + 1e-6
    return 1.0 - (inter / union).mean()


class FullModel(nn.Module):
    """model + criterion in one module so that the loss is computed on each replica"""

    def __init__(self, model, cfg: ARCH, class_weights):
        super().__init__()
        self.model = model
        self.cfg = cfg
        self.register_buffer("w", class_weights)

    def forward(self, proj_in, proj_labels):
        out, a1, a2 = self.model(proj_in)
        loss = F.cross_entropy(out, proj_labels, weight=self.w) \
            + soft_iou_loss(out, proj_labels, self.cfg.n_classes)
        for aux in (a1, a2):
            loss = loss + self.cfg.aux_weight * F.cross_entropy(aux, proj_labels, weight=self.w)
        return loss, out


class ReplicaParallel(nn.Module):
    """scatter inputs along the batch, run replicas, gather: 0-d outputs are stacked"""

    def __init__(self, module, n_replicas):
        super().__init__()
        self.module = module
        self.n = n_replicas

    def forward(self, *inputs):
        if self.n <= 1:
            return self.module(*inputs)
        scattered = [torch.chunk(t, self.n, dim=0) for t in inputs]
        outputs = [self.module(*[s[i] for s in scattered]) for i in range(self.n)]
        gathered = []
        for parts in zip(*outputs):
            if parts[0].dim() == 0:
                gathered.append(torch.stack(parts))
            else:
                gathered.append(torch.cat(parts, dim=0))
        return tuple(gathered)


class AverageMeter:
    def __init__(self):
        self.sum, self.count = 0.0, 0

    def update(self, v, n=1):
        self.sum += v * n
        self.count += n

    @property
    def avg(self):
        return self.sum / max(self.count, 1)


class Trainer:
    def __init__(self, cfg: ARCH):
        self.cfg = cfg
        content = torch.tensor([0.5, 0.2, 0.1, 0.1, 0.05, 0.05])
        class_weights = 1.0 / (content + 0.001)
        class_weights[0] = 0.0  # unlabeled
        self.net = FullModel(CENetHead(cfg), cfg, class_weights)
        self.model = ReplicaParallel(self.net, cfg.n_gpus)
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=cfg.lr,
                                         momentum=cfg.momentum, weight_decay=cfg.w_decay)
        total = cfg.epochs * cfg.iters_per_epoch
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda it: 0.5 * (1 + math.cos(math.pi * it / total)))
        self.gen = torch.Generator().manual_seed(0)

    def sample(self):
        c = self.cfg
        proj_in = torch.randn(c.batch_size, c.in_channels, c.H, c.W, generator=self.gen)
        proj_labels = torch.randint(0, c.n_classes, (c.batch_size, c.H, c.W), generator=self.gen)
        return proj_in, proj_labels

    @staticmethod
    def accuracy(out, labels):
        pred = out.argmax(1)
        mask = labels > 0
        return (pred[mask] == labels[mask]).float().mean().item()

    def train_epoch(self, epoch):
        losses, acc = AverageMeter(), AverageMeter()
        self.model.train()
        end = time.time()
        for i in range(self.cfg.iters_per_epoch):
            proj_in, proj_labels = self.sample()
            loss, output = self.model(proj_in, proj_labels)
            self.optimizer.zero_grad()
            loss.backward()  # raises
            self.optimizer.step()
            self.scheduler.step()
            losses.update(loss.mean().item(), proj_in.size(0))
            acc.update(self.accuracy(output.detach(), proj_labels), proj_in.size(0))
            if i % self.cfg.report_batch == 0:
                print(f"Lr: {self.scheduler.get_last_lr()[0]:.3e} | Epoch: [{epoch}][{i}] | "
                      f"Loss {losses.avg:.4f} | acc {acc.avg:.3f} | {time.time() - end:.2f}s")
        return losses.avg, acc.avg

    def train(self):
        best = float("inf")
        for epoch in range(self.cfg.epochs):
            loss, acc = self.train_epoch(epoch)
            if loss < best:
                best = loss
                print(f"Best loss so far {best:.4f}, saving state dict (skipped)")
        return best


def main():
    torch.manual_seed(0)
    trainer = Trainer(ARCH())
    trainer.train()


if __name__ == "__main__":
    main()
