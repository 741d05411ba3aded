# expect: no_grad_fn
# source: https://github.com/AaronComo/LipFD/issues/18
"""Lip-forgery detector training loop (LipFD-style, miniature).

A frozen global image encoder produces a clip-level feature, a small
region-aware ResNet backbone scores multi-scale lip crops and weights them,
and a `Trainer` built from an options Namespace owns the optimizer, the
region-awareness loss and the BCE loss.  Synthetic videos, CPU only.
"""
import argparse
import os
from typing import List

import numpy as np
import torch
import torch.nn as nn
from torch.nn.functional import softmax


# ----------------------------------------------------------------------------
# models
# ----------------------------------------------------------------------------
def conv3x3(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(planes),
            )

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out = out + identity
        return self.relu(out)


class RegionBackbone(nn.Module):
    def __init__(self, width=16, global_dim=24):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = BasicBlock(width, width)
        self.layer2 = BasicBlock(width, 2 * width, stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        feat_dim = 2 * width + global_dim
        self.get_weight = nn.Sequential(nn.Linear(feat_dim, 1), nn.Sigmoid())
        self.fc = nn.Linear(feat_dim, 1)

    def _forward_impl(self, x, feature):
        features, weights, parts, weights_org, weights_max = [list() for _ in range(5)]
        for i in range(len(x[0])):
            features.clear()
            weights.clear()
            for j in range(len(x)):
                f = x[j][i]
                f = self.relu(self.bn1(self.conv1(f)))
                f = self.layer2(self.layer1(f))
                f = torch.flatten(self.avgpool(f), 1)
                features.append(torch.cat([f, feature], dim=1))
                weights.append(self.get_weight(features[-1]))
            features_stack = torch.stack(features, dim=2)
            weights_stack = softmax(torch.stack(weights, dim=2), dim=2)
            weights_max.append(weights_stack[:, :, :len(x)].max(dim=2)[0])
            weights_org.append(weights_stack[:, :, 0])
            parts.append(features_stack.mul(weights_stack).sum(2).div(weights_stack.sum(2)))
        parts_stack = torch.stack(parts, dim=2)
        out = parts_stack.mean(dim=2)
        return self.fc(out), weights_max, weights_org

    def forward(self, x, feature):
        return self._forward_impl(x, feature)


class GlobalEncoder(nn.Module):
    """Stand-in for the pretrained image encoder (kept frozen when fine-tuning)."""

    def __init__(self, out_dim=24):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.GELU(),
                                  nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.GELU())
        self.proj = nn.Linear(16, out_dim)

    def encode_image(self, x):
        h = self.stem(x).mean(dim=(2, 3))
        return self.proj(h)


class LipFD(nn.Module):
    def __init__(self, global_dim=24):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 3, kernel_size=5, stride=5)
        self.encoder = GlobalEncoder(global_dim)
        self.backbone = RegionBackbone(global_dim=global_dim)

    def forward(self, x, feature):
        return self.backbone(x, feature)

    def get_features(self, x):
        x = self.conv1(x)
        return self.encoder.encode_image(x)


class RALoss(nn.Module):
    def forward(self, alphas_max, alphas_org):
        loss = 0.0
        batch_size = alphas_org[0].shape[0]
        for i in range(len(alphas_org)):
            loss_wt = 0.0
            for j in range(batch_size):
                loss_wt += torch.tensor([10.0]) / torch.exp(alphas_max[i][j] - alphas_org[i][j])
            loss += loss_wt / batch_size
        return loss


def build_model(arch):
    assert arch == "CLIP:ViT-L/14"
    return LipFD()


def get_loss():
    return RALoss()


# ----------------------------------------------------------------------------
# trainer
# ----------------------------------------------------------------------------
class Trainer:
    def __init__(self, opt):
        self.opt = opt
        self.total_steps = 0
        self.save_dir = os.path.join(opt.checkpoints_dir, opt.name)
        self.device = torch.device("cpu")
        self.model = build_model(opt.arch)

        if opt.fix_encoder:
            params = []
            for name, p in self.model.named_parameters():
                if name.split(".")[0] in ["encoder"]:
                    p.requires_grad = False
                else:
                    p.requires_grad = False
            params = self.model.parameters()

        if opt.optim == "adam":
            self.optimizer = torch.optim.AdamW(params, lr=opt.lr, betas=(opt.beta1, 0.999),
                                               weight_decay=opt.weight_decay)
        elif opt.optim == "sgd":
            self.optimizer = torch.optim.SGD(params, lr=opt.lr, momentum=0.0,
                                             weight_decay=opt.weight_decay)
        else:
            raise ValueError("optim should be [adam, sgd]")

        self.criterion = get_loss().to(self.device)
        self.criterion1 = nn.BCEWithLogitsLoss()
        self.model.to(self.device)

    def adjust_learning_rate(self, min_lr=1e-8):
        for param_group in self.optimizer.param_groups:
            if param_group["lr"] < min_lr:
                return False
            param_group["lr"] /= 10.0
        return True

    def set_input(self, input):
        self.input = input[0].to(self.device)
        self.crops = [[t.to(self.device) for t in sublist] for sublist in input[1]]
        self.label = input[2].to(self.device).float()

    def get_features(self):
        self.features = self.model.get_features(self.input).to(self.device)

    def forward(self):
        self.get_features()
        self.output, self.weights_max, self.weights_org = self.model.forward(self.crops, self.features)
        self.output = self.output.view(-1)
        self.loss = self.criterion(self.weights_max, self.weights_org) + self.criterion1(self.output, self.label)

    def get_loss(self):
        loss = self.loss.data.tolist()
        return loss[0] if isinstance(loss, list) else loss

    def optimize_parameters(self):
        self.optimizer.zero_grad()
        self.loss.backward()  # raises
        self.optimizer.step()

    def eval(self):
        self.model.eval()

    def train(self):
        self.model.train()

    def test(self):
        with torch.no_grad():
            self.forward()


# ----------------------------------------------------------------------------
# data + loops
# ----------------------------------------------------------------------------
def make_batch(rng, batch_size, n_regions=3, n_frames=2, crop=16):
    full = torch.from_numpy(rng.rand(batch_size, 3, 5 * crop, 5 * crop).astype(np.float32))
    crops = [[torch.from_numpy(rng.rand(batch_size, 3, crop, crop).astype(np.float32))
              for _ in range(n_frames)] for _ in range(n_regions)]
    label = torch.from_numpy(rng.randint(0, 2, size=batch_size))
    return full, crops, label


def validate(trainer, batches: List):
    trainer.eval()
    correct, total = 0, 0
    for batch in batches:
        trainer.set_input(batch)
        trainer.test()
        pred = (torch.sigmoid(trainer.output) > 0.5).long()
        correct += (pred == trainer.label.long()).sum().item()
        total += pred.numel()
    trainer.train()
    return correct / max(total, 1)


def parse_opt(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--arch", default="CLIP:ViT-L/14")
    p.add_argument("--name", default="lipfd_demo")
    p.add_argument("--checkpoints_dir", default="./checkpoints")
    p.add_argument("--optim", default="adam")
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--weight_decay", type=float, default=0.0)
    p.add_argument("--fix_encoder", type=int, default=1)
    p.add_argument("--batch_size", type=int, default=4)
    p.add_argument("--epoch", type=int, default=2)
    p.add_argument("--steps_per_epoch", type=int, default=3)
    return p.parse_args(argv)


def main(argv=None):
    opt = parse_opt(argv)
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    trainer = Trainer(opt)
    val_batches = [make_batch(rng, opt.batch_size) for _ in range(2)]
    trainer.train()
    for epoch in range(opt.epoch):
        for _ in range(opt.steps_per_epoch):
            trainer.total_steps += 1
            trainer.set_input(make_batch(rng, opt.batch_size))
            trainer.forward()
            trainer.optimize_parameters()
            if trainer.total_steps % 2 == 0:
                print("step %d loss %.4f" % (trainer.total_steps, trainer.get_loss()))
        acc = validate(trainer, val_batches)
        print("epoch %d val acc %.3f" % (epoch, acc))


if __name__ == "__main__":
    main([])
