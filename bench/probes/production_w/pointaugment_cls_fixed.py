# expect: clean
# source: https://github.com/liruihui/PointAugment/issues/15
"""PointAugment: adversarial auto-augmentation for point cloud classification.

A learnable augmentor (quaternion rotation head + per-point displacement head)
produces a harder version of every training cloud, and a PointNet classifier
is trained on both the original and the augmented clouds.  The augmentor and
the classifier have their own Adam optimizers and are updated in alternation
every iteration, as in the original training script (Augment/model.py).
Synthetic ModelNet-like clouds (noisy primitives) stand in for the dataset.
"""
import argparse
import logging
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

NUM = 1.2
W = 1.0


def parse_args(argv=None):
    parser = argparse.ArgumentParser("PointAugment")
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--num_points", type=int, default=64)
    parser.add_argument("--num_class", type=int, default=4)
    parser.add_argument("--feat_dim", type=int, default=64)
    parser.add_argument("--epoch", type=int, default=2)
    parser.add_argument("--batches_per_epoch", type=int, default=3)
    parser.add_argument("--learning_rate", type=float, default=1e-3)
    parser.add_argument("--learning_rate_a", type=float, default=1e-3)
    parser.add_argument("--decay_rate", type=float, default=1e-4)
    parser.add_argument("--lr_decay", type=float, default=0.5)
    parser.add_argument("--no_decay", action="store_true")
    parser.add_argument("--model_name", type=str, default="pointnet")
    return parser.parse_args(argv)


# ----------------------------------------------------------------- augmentor
def batch_quat_to_rotmat(q, out=None):
    B = q.size(0)
    if out is None:
        out = q.new_empty(B, 3, 3)
    length = torch.sum(q.pow(2), 1)
    s = 2 / length
    s_ = torch.clamp(length, 2.0 / 3.0, 3.0 / 2.0)
    h = torch.bmm(q.unsqueeze(2), q.unsqueeze(1))
    out[:, 0, 0] = 1 - (h[:, 2, 2] + h[:, 3, 3]).mul(s)
    out[:, 0, 1] = (h[:, 1, 2] - h[:, 3, 0]).mul(s)
    out[:, 0, 2] = (h[:, 1, 3] + h[:, 2, 0]).mul(s)
    out[:, 1, 0] = (h[:, 1, 2] + h[:, 3, 0]).mul(s)
    out[:, 1, 1] = 1 - (h[:, 1, 1] + h[:, 3, 3]).mul(s)
    out[:, 1, 2] = (h[:, 2, 3] - h[:, 1, 0]).mul(s)
    out[:, 2, 0] = (h[:, 1, 3] - h[:, 2, 0]).mul(s)
    out[:, 2, 1] = (h[:, 2, 3] + h[:, 1, 0]).mul(s)
    out[:, 2, 2] = 1 - (h[:, 1, 1] + h[:, 2, 2]).mul(s)
    return out, s_


class AugmentorRotation(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc1 = nn.Linear(dim * 2, 64)
        self.fc2 = nn.Linear(64, 32)
        self.fc3 = nn.Linear(32, 4)
        self.bn1 = nn.BatchNorm1d(64)
        self.bn2 = nn.BatchNorm1d(32)

    def forward(self, x):
        x = F.relu(self.bn1(self.fc1(x)))
        x = F.relu(self.bn2(self.fc2(x)))
        x = self.fc3(x)
        iden = x.new_tensor([1, 0, 0, 0])
        x = x + iden
        x, _ = batch_quat_to_rotmat(x)
        return x.view(-1, 3, 3)


class AugmentorDisplacement(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.conv1 = nn.Conv1d(dim * 2 + 32, 64, 1)
        self.conv2 = nn.Conv1d(64, 32, 1)
        self.conv3 = nn.Conv1d(32, 3, 1)
        self.bn1 = nn.BatchNorm1d(64)
        self.bn2 = nn.BatchNorm1d(32)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        return self.conv3(x)


class Augmentor(nn.Module):
    def __init__(self, dim=64, in_dim=3):
        super().__init__()
        self.dim = dim
        self.conv1 = nn.Conv1d(in_dim, 32, 1)
        self.conv2 = nn.Conv1d(32, dim, 1)
        self.bn1 = nn.BatchNorm1d(32)
        self.bn2 = nn.BatchNorm1d(dim)
        self.rot = AugmentorRotation(dim)
        self.dis = AugmentorDisplacement(dim)

    def forward(self, pt, noise):
        B, C, N = pt.size()
        raw_pt = pt[:, :3, :].contiguous()
        x = F.relu(self.bn1(self.conv1(raw_pt)))
        pointfeat = x
        x = F.relu(self.bn2(self.conv2(x)))
        x = torch.max(x, 2, keepdim=True)[0]
        feat_r = torch.cat([x.view(-1, self.dim), noise], 1)
        rotation = self.rot(feat_r)
        feat_d = x.view(-1, self.dim, 1).repeat(1, 1, N)
        noise_d = noise.view(B, -1, 1).repeat(1, 1, N)
        displacement = self.dis(torch.cat([pointfeat, feat_d, noise_d], 1))
        pt = raw_pt.transpose(2, 1).contiguous()
        pt = torch.bmm(pt, rotation).transpose(1, 2).contiguous()
        return pt + displacement


# ---------------------------------------------------------------- classifier
class STN3d(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv1d(3, 32, 1)
        self.conv2 = nn.Conv1d(32, 64, 1)
        self.fc = nn.Linear(64, 9)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = torch.max(F.relu(self.conv2(x)), 2)[0]
        iden = torch.eye(3, device=x.device).view(1, 9)
        return (self.fc(x) + iden).view(-1, 3, 3)


class PointNetCls(nn.Module):
    def __init__(self, k, dim=64):
        super().__init__()
        self.stn = STN3d()
        self.conv1 = nn.Conv1d(3, 32, 1)
        self.conv2 = nn.Conv1d(32, dim, 1)
        self.bn1 = nn.BatchNorm1d(32)
        self.bn2 = nn.BatchNorm1d(dim)
        self.fc1 = nn.Linear(dim, 32)
        self.fc2 = nn.Linear(32, k)
        self.dropout = nn.Dropout(p=0.3)

    def forward(self, x):
        trans = self.stn(x)
        x = torch.bmm(x.transpose(2, 1), trans).transpose(2, 1)
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.bn2(self.conv2(x))
        feat = torch.max(x, 2)[0]
        x = F.relu(self.fc1(feat))
        x = self.fc2(self.dropout(x))
        return x, trans, feat


# -------------------------------------------------------------------- losses
def cal_loss_raw(pred, gold, eps=0.2):
    n_class = pred.size(1)
    one_hot = torch.zeros_like(pred).scatter(1, gold.view(-1, 1), 1)
    one_hot = one_hot * (1 - eps) + (1 - one_hot) * eps / (n_class - 1)
    loss_raw = -(one_hot * F.log_softmax(pred, dim=1)).sum(dim=1)
    return loss_raw.mean(), loss_raw


def mat_loss(trans):
    eye = torch.eye(trans.size(1), device=trans.device)[None]
    return torch.mean(torch.norm(torch.bmm(trans, trans.transpose(2, 1)) - eye, dim=(1, 2)))


def cls_loss(pred, pred_aug, gold, pc_tran, aug_tran, pc_feat, aug_feat, ispn=True):
    cls_pc, _ = cal_loss_raw(pred, gold)
    cls_aug, _ = cal_loss_raw(pred_aug, gold)
    if ispn:
        cls_pc = cls_pc + 0.001 * mat_loss(pc_tran)
        cls_aug = cls_aug + 0.001 * mat_loss(aug_tran)
    feat_diff = 10.0 * F.mse_loss(pc_feat, aug_feat)
    return cls_pc + cls_aug + feat_diff


def aug_loss(pred, pred_aug, gold, pc_tran, aug_tran, ispn=True):
    cls_pc, cls_pc_raw = cal_loss_raw(pred, gold)
    cls_aug, cls_aug_raw = cal_loss_raw(pred_aug, gold)
    if ispn:
        cls_pc = cls_pc + 0.001 * mat_loss(pc_tran)
        cls_aug = cls_aug + 0.001 * mat_loss(aug_tran)
    pc_con = F.softmax(pred, dim=-1)
    one_hot = F.one_hot(gold, pred.shape[1]).float()
    pc_con = (pc_con * one_hot).max(dim=1)[0]
    parameters = torch.max(torch.tensor(NUM), torch.exp(pc_con) * NUM)
    aug_diff = W * torch.abs(1.0 - torch.exp(cls_aug_raw - cls_pc_raw * parameters)).mean()
    return cls_aug + aug_diff


# ---------------------------------------------------------------------- data
class PointcloudScaleAndTranslate:
    def __init__(self, scale_low=2. / 3., scale_high=3. / 2., translate_range=0.2):
        self.scale_low, self.scale_high, self.translate_range = scale_low, scale_high, translate_range

    def __call__(self, pc):
        bsize = pc.size(0)
        for i in range(bsize):
            xyz1 = np.random.uniform(self.scale_low, self.scale_high, size=[3])
            xyz2 = np.random.uniform(-self.translate_range, self.translate_range, size=[3])
            pc[i, :, 0:3] = pc[i, :, 0:3] * torch.from_numpy(xyz1).float() + torch.from_numpy(xyz2).float()
        return pc


def synthetic_batches(opts, n_batches):
    for _ in range(n_batches):
        target = torch.randint(0, opts.num_class, (opts.batch_size, 1))
        base = torch.randn(opts.batch_size, opts.num_points, 3)
        base = F.normalize(base, dim=-1) * (1.0 + target.view(-1, 1, 1).float() * 0.3)
        yield base + 0.02 * torch.randn_like(base), target


class Model:
    def __init__(self, opts):
        self.opts = opts
        self.logger = logging.getLogger("CLS")
        self.history = []

    def log_string(self, msg):
        self.logger.info(msg)
        self.history.append(msg)

    def train(self):
        opts = self.opts
        classifier = PointNetCls(opts.num_class, opts.feat_dim)
        augmentor = Augmentor(dim=opts.feat_dim)
        optimizer_c = torch.optim.Adam(classifier.parameters(), lr=opts.learning_rate,
                                       betas=(0.9, 0.999), eps=1e-08, weight_decay=opts.decay_rate)
        optimizer_a = torch.optim.Adam(augmentor.parameters(), lr=opts.learning_rate_a,
                                       betas=(0.9, 0.999), eps=1e-08, weight_decay=opts.decay_rate)
        scheduler_c = None if opts.no_decay else torch.optim.lr_scheduler.StepLR(
            optimizer_c, step_size=20, gamma=opts.lr_decay)
        ispn = opts.model_name == "pointnet"
        scale_translate = PointcloudScaleAndTranslate()

        for epoch in range(opts.epoch):
            self.log_string("Epoch %d/%d" % (epoch + 1, opts.epoch))
            for points, target in synthetic_batches(opts, opts.batches_per_epoch):
                target = target[:, 0].long()
                points = scale_translate(points)
                points = points.transpose(2, 1).contiguous()
                noise = 0.02 * torch.randn(opts.batch_size, opts.feat_dim)

                classifier = classifier.train()
                augmentor = augmentor.train()
                optimizer_a.zero_grad()
                aug_pc = augmentor(points, noise)

                pred_pc, pc_tran, pc_feat = classifier(points)
                pred_aug, aug_tran, aug_feat = classifier(aug_pc)
                augLoss = aug_loss(pred_pc, pred_aug, target, pc_tran, aug_tran, ispn=ispn)

                augLoss.backward(retain_graph=True)

                optimizer_c.zero_grad()
                clsLoss = cls_loss(pred_pc, pred_aug, target, pc_tran, aug_tran, pc_feat,
                                   aug_feat, ispn=ispn)
                clsLoss.backward(inputs=list(classifier.parameters()))
                optimizer_a.step()
                optimizer_c.step()
            if scheduler_c is not None:
                scheduler_c.step()
            acc = self.eval_one_epoch(classifier.eval())
            self.log_string("CLS Loss: %.3f  AUG Loss: %.3f  acc: %.3f"
                            % (clsLoss.item(), augLoss.item(), acc))
        return classifier

    @torch.no_grad()
    def eval_one_epoch(self, model):
        correct, total = 0, 0
        for points, target in synthetic_batches(self.opts, 2):
            pred, _, _ = model(points.transpose(2, 1))
            correct += (pred.argmax(1) == target[:, 0]).sum().item()
            total += target.size(0)
        return correct / total


def main():
    random.seed(999)
    np.random.seed(999)
    torch.manual_seed(999)
    opts = parse_args([])
    Model(opts).train()


if __name__ == "__main__":
    main()
