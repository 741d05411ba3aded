# expect: nonscalar_backward
# source: https://github.com/kozistr/pytorch_optimizer/issues/64
"""Active learning with "Learning Loss" (LL4AL) and a SAM-optimised backbone.

A small ResNet backbone returns class scores and its four stage features; the
loss-prediction module (LossNet) regresses the per-sample target loss from
those features and is trained with the margin ranking loss.  The backbone is
optimised with Sharpness-Aware Minimization (closure-style `step`, as in
pytorch_optimizer), the module with plain SGD, each with a MultiStepLR
schedule.  Each active-learning cycle trains, tests, and queries the most
"lossy" unlabeled samples.  Synthetic CIFAR-like data.
"""
import argparse
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim import Optimizer, lr_scheduler
from torch.utils.data import DataLoader, Subset, TensorDataset


class SAM(Optimizer):
    """Sharpness-Aware Minimization; `step` needs a closure doing a full forward/backward."""

    def __init__(self, params, base_optimizer, rho=0.05, adaptive=False, **kwargs):
        defaults = dict(rho=rho, adaptive=adaptive, **kwargs)
        super().__init__(params, defaults)
        self.base_optimizer = base_optimizer(self.param_groups, **kwargs)
        self.param_groups = self.base_optimizer.param_groups

    @torch.no_grad()
    def first_step(self, zero_grad=False):
        grad_norm = self.grad_norm()
        for group in self.param_groups:
            scale = group["rho"] / (grad_norm + 1e-12)
            for p in group["params"]:
                if p.grad is None:
                    continue
                self.state[p]["old_p"] = p.clone()
                e_w = (torch.pow(p, 2) if group["adaptive"] else 1.0) * p.grad * scale.to(p)
                p.add_(e_w)
        if zero_grad:
            self.zero_grad()

    @torch.no_grad()
    def second_step(self, zero_grad=False):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                p.data = self.state[p]["old_p"]
        self.base_optimizer.step()
        if zero_grad:
            self.zero_grad()

    @torch.no_grad()
    def step(self, closure=None):
        if closure is None:
            raise RuntimeError("[-] Sharpness Aware Minimization (SAM) requires closure")
        self.first_step(zero_grad=True)
        with torch.enable_grad():
            closure()
        self.second_step()

    def grad_norm(self):
        return torch.norm(torch.stack([
            ((torch.abs(p) if group["adaptive"] else 1.0) * p.grad).norm(p=2)
            for group in self.param_groups for p in group["params"] if p.grad is not None]), p=2)


class BasicBlock(nn.Module):
    def __init__(self, in_planes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(nn.Conv2d(in_planes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, widths=(8, 16, 32, 64), num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        ins = [widths[0]] + list(widths[:-1])
        self.layers = nn.ModuleList([BasicBlock(i, o, 1 if k == 0 else 2) for k, (i, o) in enumerate(zip(ins, widths))])
        self.linear = nn.Linear(widths[-1], num_classes)

    def forward(self, x):
        out, features = F.relu(self.bn1(self.conv1(x))), []
        for layer in self.layers:
            out = layer(out)
            features.append(out)
        outf = F.adaptive_avg_pool2d(out, 1).flatten(1)
        return self.linear(outf), outf, features


class LossNet(nn.Module):
    def __init__(self, num_channels=(8, 16, 32, 64), interm_dim=16):
        super().__init__()
        self.fcs = nn.ModuleList([nn.Linear(c, interm_dim) for c in num_channels])
        self.linear = nn.Linear(len(num_channels) * interm_dim, 1)

    def forward(self, features):
        outs = [F.relu(fc(F.adaptive_avg_pool2d(f, 1).flatten(1))) for fc, f in zip(self.fcs, features)]
        return self.linear(torch.cat(outs, 1))


def LossPredLoss(input, target, margin=1.0, reduction="mean"):
    assert len(input) % 2 == 0, "the batch size is not even."
    input = (input - input.flip(0))[:len(input) // 2]
    target = (target - target.flip(0))[:len(target) // 2].detach()
    one = 2 * torch.sign(torch.clamp(target, min=0)) - 1
    loss = torch.clamp(margin - one * input, min=0)
    return torch.sum(loss) / input.size(0) if reduction == "mean" else loss


def train_epoch(models, method, criterion, optimizers, dataloaders, epoch, args):
    models["backbone"].train()
    if method == "lloss":
        models["module"].train()
    for inputs, labels in dataloaders["train"]:
        for opt in optimizers.values():
            opt.zero_grad()
        scores, _, features = models["backbone"](inputs)
        target_loss = criterion(scores, labels)
        m_backbone_loss = torch.sum(target_loss) / target_loss.size(0)
        loss = m_backbone_loss
        if method == "lloss":
            if epoch > args.epoch_loss:
                features = [f.detach() for f in features]
            pred_loss = models["module"](features).view(-1)
            m_module_loss = LossPredLoss(pred_loss, target_loss, margin=args.margin)
            loss = m_backbone_loss + args.weight * m_module_loss
        loss.backward()

        def closure():
            criterion(models["backbone"](inputs)[0], labels).backward()  # raises

        optimizers["backbone"].step(closure)
        if method == "lloss":
            optimizers["module"].step()


@torch.no_grad()
def test(models, dataloaders, mode="test"):
    models["backbone"].eval()
    total = correct = 0
    for inputs, labels in dataloaders[mode]:
        scores, _, _ = models["backbone"](inputs)
        correct += (scores.argmax(1) == labels).sum().item()
        total += labels.size(0)
    return 100.0 * correct / total


@torch.no_grad()
def get_uncertainty(models, unlabeled_loader):
    models["backbone"].eval()
    models["module"].eval()
    uncertainty = []
    for inputs, _ in unlabeled_loader:
        _, _, features = models["backbone"](inputs)
        uncertainty.append(models["module"](features).view(-1))
    return torch.cat(uncertainty)


def train(models, method, criterion, optimizers, schedulers, dataloaders, args):
    for epoch in range(args.epochs):
        train_epoch(models, method, criterion, optimizers, dataloaders, epoch, args)
        for sched in schedulers.values():
            sched.step()
        print("epoch %d  acc %.2f" % (epoch, test(models, dataloaders)))


def main():
    args = argparse.Namespace(method="lloss", cycles=2, epochs=2, epoch_loss=1, batch=16, addendum=16,
                              subset=48, margin=1.0, weight=1.0, lr=0.05, momentum=0.9, wdecay=5e-4,
                              milestones=[1], rho=0.05, seed=0)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    x = torch.randn(160, 3, 16, 16)
    y = torch.randint(0, 10, (160,))
    train_set, test_set = TensorDataset(x[:128], y[:128]), TensorDataset(x[128:], y[128:])
    indices = list(range(128))
    random.shuffle(indices)
    labeled_set, unlabeled_set = indices[:32], indices[32:]
    dataloaders = {"train": DataLoader(Subset(train_set, labeled_set), batch_size=args.batch, shuffle=True),
                   "test": DataLoader(test_set, batch_size=args.batch)}
    models = {"backbone": ResNet(), "module": LossNet()}
    for cycle in range(args.cycles):
        # Loss, criterion and scheduler (re)initialization
        criterion = nn.CrossEntropyLoss(reduction="none")
        optim_backbone = SAM(models["backbone"].parameters(), torch.optim.SGD, rho=args.rho, lr=args.lr,
                             momentum=args.momentum, weight_decay=args.wdecay)
        optim_module = torch.optim.SGD(models["module"].parameters(), lr=args.lr, momentum=args.momentum,
                                       weight_decay=args.wdecay)
        optimizers = {"backbone": optim_backbone, "module": optim_module}
        schedulers = {k: lr_scheduler.MultiStepLR(o, milestones=args.milestones) for k, o in optimizers.items()}
        train(models, args.method, criterion, optimizers, schedulers, dataloaders, args)
        acc = test(models, dataloaders)
        print("Cycle %d/%d || Label set size %d: Test acc %.2f" % (cycle + 1, args.cycles, len(labeled_set), acc))
        subset = unlabeled_set[:args.subset]
        unlabeled_loader = DataLoader(Subset(train_set, subset), batch_size=args.batch)
        arg = np.argsort(get_uncertainty(models, unlabeled_loader).numpy())
        labeled_set += list(np.array(subset)[arg][-args.addendum:])
        unlabeled_set = list(np.array(subset)[arg][:-args.addendum]) + unlabeled_set[args.subset:]
        dataloaders["train"] = DataLoader(Subset(train_set, labeled_set), batch_size=args.batch, shuffle=True)


if __name__ == "__main__":
    main()
