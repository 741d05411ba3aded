# expect: inplace_version
# source: https://github.com/clovaai/CutMix-PyTorch/issues/5
"""Kaggle-style image classification with CutMix, following clovaai/CutMix-PyTorch
train.py: argparse options, a torchvision-like ResNet with Bottleneck blocks,
rand_bbox, image-level CutMix in the training loop and the "feature CutMix"
variant inside ResNet.forward (after layer1), AverageMeter / accuracy helpers,
cosine lr adjust, train/validate per epoch and best-error tracking.
Synthetic 32x32 images replace CIFAR."""
import argparse
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)

parser = argparse.ArgumentParser(description="CutMix PyTorch CIFAR-like training")
parser.add_argument("--epochs", default=2, type=int)
parser.add_argument("--batch_size", default=8, type=int)
parser.add_argument("--lr", default=0.1, type=float)
parser.add_argument("--momentum", default=0.9, type=float)
parser.add_argument("--weight_decay", default=1e-4, type=float)
parser.add_argument("--beta", default=1.0, type=float, help="hyperparameter beta")
parser.add_argument("--cutmix_prob", default=1.0, type=float, help="cutmix probability")
parser.add_argument("--cutmix_level", default="feature", choices=["image", "feature"])
parser.add_argument("--num_classes", default=5, type=int)
parser.add_argument("--print-freq", default=2, type=int)


def rand_bbox(size, lam):
    W, H = size[2], size[3]
    cut_rat = np.sqrt(1.0 - lam)
    cut_w, cut_h = int(W * cut_rat), int(H * cut_rat)
    cx, cy = np.random.randint(W), np.random.randint(H)
    bbx1 = np.clip(cx - cut_w // 2, 0, W)
    bby1 = np.clip(cy - cut_h // 2, 0, H)
    bbx2 = np.clip(cx + cut_w // 2, 0, W)
    bby2 = np.clip(cy + cut_h // 2, 0, H)
    return bbx1, bby1, bbx2, bby2


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super(Bottleneck, self).__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, kernel_size=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, kernel_size=1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        residual = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            residual = self.downsample(x)
        out += residual
        out = self.relu(out)
        return out


class ResNet(nn.Module):
    def __init__(self, block, layers, num_classes=10, width=8):
        super(ResNet, self).__init__()
        self.inplanes = width
        self.conv1 = nn.Conv2d(3, width, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._make_layer(block, width, layers[0])
        self.layer2 = self._make_layer(block, width * 2, layers[1], stride=2)
        self.layer3 = self._make_layer(block, width * 4, layers[2], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(width * 4 * block.expansion, num_classes)
        self.feature_cutmix = None  # (lam, rand_index) set by the training loop
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()

    def _make_layer(self, block, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * block.expansion))
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(block(self.inplanes, planes))
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer1(x)
        if self.training and self.feature_cutmix is not None:
            # Feature CutMix
            lam, rand_index = self.feature_cutmix
            bbx1, bby1, bbx2, bby2 = rand_bbox(x.size(), lam)
            x[:, :, bbx1:bbx2, bby1:bby2] = x[rand_index, :, bbx1:bbx2, bby1:bby2]
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.avgpool(x).flatten(1)
        return self.fc(x)


class AverageMeter(object):
    def __init__(self):
        self.reset()

    def reset(self):
        self.val = self.avg = self.sum = self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def accuracy(output, target, topk=(1,)):
    maxk = max(topk)
    batch_size = target.size(0)
    _, pred = output.topk(maxk, 1, True, True)
    correct = pred.t().eq(target.view(1, -1).expand_as(pred.t()))
    return [correct[:k].reshape(-1).float().sum(0) * 100.0 / batch_size for k in topk]


def get_learning_rate(optimizer):
    return [g["lr"] for g in optimizer.param_groups]


def adjust_learning_rate(optimizer, epoch, args):
    lr = args.lr * 0.5 * (1 + np.cos(np.pi * epoch / args.epochs))
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr


def make_loader(n, args, seed):
    g = torch.Generator().manual_seed(seed)
    protos = torch.randn(args.num_classes, 3, 32, 32, generator=g)
    y = torch.randint(0, args.num_classes, (n,), generator=g)
    x = protos[y] + 0.7 * torch.randn(n, 3, 32, 32, generator=g)
    return [(x[i:i + args.batch_size], y[i:i + args.batch_size]) for i in range(0, n, args.batch_size)]


def train(train_loader, model, criterion, optimizer, epoch, args):
    batch_time, losses, top1 = AverageMeter(), AverageMeter(), AverageMeter()
    model.train()
    end = time.time()
    for i, (input, target) in enumerate(train_loader):
        r = np.random.rand(1)
        model.feature_cutmix = None
        if args.beta > 0 and r < args.cutmix_prob:
            lam = np.random.beta(args.beta, args.beta)
            rand_index = torch.randperm(input.size()[0])
            target_a, target_b = target, target[rand_index]
            if args.cutmix_level == "image":
                bbx1, bby1, bbx2, bby2 = rand_bbox(input.size(), lam)
                input[:, :, bbx1:bbx2, bby1:bby2] = input[rand_index, :, bbx1:bbx2, bby1:bby2]
                lam = 1 - ((bbx2 - bbx1) * (bby2 - bby1) / (input.size()[-1] * input.size()[-2]))
            else:
                model.feature_cutmix = (lam, rand_index)
            output = model(input)
            loss = criterion(output, target_a) * lam + criterion(output, target_b) * (1.0 - lam)
        else:
            output = model(input)
            loss = criterion(output, target)
        err1 = 100.0 - accuracy(output.data, target, topk=(1,))[0].item()
        losses.update(loss.item(), input.size(0))
        top1.update(err1, input.size(0))
        optimizer.zero_grad()
        loss.backward()  # raises
        optimizer.step()
        batch_time.update(time.time() - end)
        end = time.time()
        if i % args.print_freq == 0:
            print("Epoch: [{0}/{1}][{2}/{3}]\tLR: {LR:.6f}\tLoss {loss.val:.4f} ({loss.avg:.4f})\tTop 1-err {top1.val:.4f}".format(
                epoch, args.epochs, i, len(train_loader), LR=get_learning_rate(optimizer)[0], loss=losses, top1=top1))
    return losses.avg


def validate(val_loader, model, criterion, args):
    losses, top1 = AverageMeter(), AverageMeter()
    model.eval()
    with torch.no_grad():
        for input, target in val_loader:
            output = model(input)
            losses.update(criterion(output, target).item(), input.size(0))
            top1.update(100.0 - accuracy(output, target, topk=(1,))[0].item(), input.size(0))
    return top1.avg, losses.avg


def main():
    args = parser.parse_args([])
    train_loader, val_loader = make_loader(32, args, 0), make_loader(16, args, 1)
    model = ResNet(Bottleneck, [1, 1, 1], num_classes=args.num_classes)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), args.lr, momentum=args.momentum,
                                weight_decay=args.weight_decay, nesterov=True)
    best_err1 = 100
    for epoch in range(args.epochs):
        adjust_learning_rate(optimizer, epoch, args)
        train_loss = train(train_loader, model, criterion, optimizer, epoch, args)
        err1, val_loss = validate(val_loader, model, criterion, args)
        best_err1 = min(err1, best_err1)
        print("Current best accuracy (top-1 error):", best_err1, "train loss", train_loss, "val loss", val_loss)
    print("Best accuracy (top-1 error):", best_err1)


if __name__ == "__main__":
    main()
