# expect: clean
# source: https://pytroubles.com/en/ampposts/id3016-pytorch-z-channel-shift-without-breaking-autograd-avoid-in-place-views-keep-gradients-safe
"""Point-cloud classification with PointNet and gradient-based point saliency.

A compact PointNet (shared 1x1 conv MLP, symmetric max-pool, FC head) is
trained on synthetic LiDAR-like scenes stored as (B, 3, N) tensors.  A
per-scene learnable ground-height offset (z-shift) is estimated jointly with
the classifier, and point saliency maps (gradient of the loss w.r.t. the
input coordinates) are collected during training for analysis.
"""
import argparse
import math
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args(argv=None):
    parser = argparse.ArgumentParser("pointnet-saliency")
    parser.add_argument("--num_point", type=int, default=64)
    parser.add_argument("--num_class", type=int, default=4)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps_per_epoch", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--offset_lr", type=float, default=1e-2)
    parser.add_argument("--decay_rate", type=float, default=1e-4)
    parser.add_argument("--saliency", action="store_true", default=True)
    parser.add_argument("--seed", type=int, default=1)
    return parser.parse_args(argv or [])


class STN3d(nn.Module):
    """Input transform network predicting a 3x3 alignment matrix."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv1d(3, 32, 1)
        self.conv2 = nn.Conv1d(32, 64, 1)
        self.fc1 = nn.Linear(64, 32)
        self.fc2 = nn.Linear(32, 9)
        self.bn1 = nn.BatchNorm1d(32)
        self.bn2 = nn.BatchNorm1d(64)

    def forward(self, x):
        b = x.size(0)
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = torch.max(x, 2)[0]
        x = F.relu(self.fc1(x))
        x = self.fc2(x)
        iden = torch.eye(3, dtype=x.dtype).flatten().unsqueeze(0).repeat(b, 1)
        return (x + iden).view(-1, 3, 3)


class PointNetEncoder(nn.Module):
    def __init__(self, global_feat=True):
        super().__init__()
        self.stn = STN3d()
        self.conv1 = nn.Conv1d(3, 32, 1)
        self.conv2 = nn.Conv1d(32, 64, 1)
        self.conv3 = nn.Conv1d(64, 128, 1)
        self.bn1 = nn.BatchNorm1d(32)
        self.bn2 = nn.BatchNorm1d(64)
        self.bn3 = nn.BatchNorm1d(128)
        self.global_feat = global_feat

    def forward(self, x):
        trans = self.stn(x)
        x = torch.bmm(x.transpose(2, 1), trans).transpose(2, 1)
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = self.bn3(self.conv3(x))
        x = torch.max(x, 2, keepdim=True)[0].view(-1, 128)
        return x, trans


class PointNetCls(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.feat = PointNetEncoder()
        self.fc1 = nn.Linear(128, 64)
        self.fc2 = nn.Linear(64, k)
        self.dropout = nn.Dropout(p=0.3)
        self.bn1 = nn.BatchNorm1d(64)

    def forward(self, x):
        x, trans = self.feat(x)
        x = F.relu(self.bn1(self.fc1(x)))
        x = self.dropout(x)
        return F.log_softmax(self.fc2(x), dim=1), trans


def feature_transform_regularizer(trans):
    d = trans.size(1)
    eye = torch.eye(d, dtype=trans.dtype)[None]
    return torch.mean(torch.norm(torch.bmm(trans, trans.transpose(2, 1)) - eye, dim=(1, 2)))


class GroundOffset(nn.Module):
    """Learnable per-scene ground height (one z-shift per sample in the batch)."""

    def __init__(self, batch_size):
        super().__init__()
        self.z = nn.Parameter(torch.zeros(batch_size, 1))

    def forward(self):
        return self.z


def apply_height_offset(points, z_offset):
    """Shift only the z channel of (B, 3, N) points by a per-batch offset."""
    return torch.stack([points[:, 0, :], points[:, 1, :], points[:, 2, :] + z_offset], dim=1)


class SyntheticScenes:
    def __init__(self, args):
        self.args = args
        self.gen = torch.Generator().manual_seed(args.seed)

    def sample(self):
        a = self.args
        labels = torch.randint(0, a.num_class, (a.batch_size,), generator=self.gen)
        pts = torch.randn(a.batch_size, 3, a.num_point, generator=self.gen) * 0.5
        pts[:, 0] += labels.float().unsqueeze(-1) * 0.4
        heights = torch.rand(a.batch_size, 1, generator=self.gen) * 2.0
        pts[:, 2] += heights
        return pts, labels


class SaliencyRecorder:
    def __init__(self):
        self.maps = []

    def __call__(self, points):
        if points.grad is not None:
            self.maps.append(points.grad.norm(dim=1).mean().item())


class Runner:
    def __init__(self, args):
        self.args = args
        self.model = PointNetCls(args.num_class)
        self.offset = GroundOffset(args.batch_size)
        self.optimizer = torch.optim.Adam(
            self.model.parameters(), lr=args.lr, betas=(0.9, 0.999), eps=1e-08, weight_decay=args.decay_rate
        )
        self.offset_optimizer = torch.optim.SGD(self.offset.parameters(), lr=args.offset_lr)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=2, gamma=0.7)
        self.data = SyntheticScenes(args)
        self.saliency = SaliencyRecorder()
        self.state = SimpleNamespace(global_step=0, best_acc=0.0)

    def prepare_points(self, points):
        if self.args.saliency:
            points = points.clone().requires_grad_(True)
        return points

    def train_step(self, points, target):
        self.model.train()
        self.optimizer.zero_grad()
        self.offset_optimizer.zero_grad()
        points = self.prepare_points(points)
        shifted = apply_height_offset(points, self.offset())
        pred, trans = self.model(shifted)
        loss = F.nll_loss(pred, target) + 0.001 * feature_transform_regularizer(trans)
        loss = loss + 0.01 * shifted[:, 2, :].mean(-1).pow(2).mean()
        loss.backward()
        self.saliency(points)
        self.optimizer.step()
        self.offset_optimizer.step()
        self.state.global_step += 1
        return loss.item()

    @torch.no_grad()
    def evaluate(self, n_batches=2):
        self.model.eval()
        correct, total = 0, 0
        for _ in range(n_batches):
            points, target = self.data.sample()
            points = points.clone()
            points[:, 2, :] += self.offset()
            pred, _ = self.model(points)
            correct += (pred.argmax(1) == target).sum().item()
            total += target.numel()
        return correct / total

    def fit(self):
        for epoch in range(self.args.epochs):
            losses = []
            for _ in range(self.args.steps_per_epoch):
                points, target = self.data.sample()
                losses.append(self.train_step(points, target))
            self.scheduler.step()
            acc = self.evaluate()
            self.state.best_acc = max(self.state.best_acc, acc)
            print(f"epoch {epoch} loss {np.mean(losses):.4f} acc {acc:.3f} "
                  f"saliency {np.mean(self.saliency.maps) if self.saliency.maps else math.nan:.4f}")
        return self.state


def main():
    args = get_args()
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    runner = Runner(args)
    state = runner.fit()
    print("best acc", state.best_acc)


if __name__ == "__main__":
    main()
