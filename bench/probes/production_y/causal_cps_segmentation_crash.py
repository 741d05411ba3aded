# expect: inplace_version
# source: https://github.com/JuzhengMiao/CauSSL/issues/4
"""Semi-supervised segmentation with cross pseudo supervision (CPS) plus the
CauSSL algorithmic-independence regulariser: two segmentation networks teach each
other with hard pseudo-labels on unlabeled images, and a min-max term decorrelates
their convolution kernels through per-layer learnable linear predictors.
Small 2-D networks on synthetic blob images.
"""
import argparse
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--max_iterations", type=int, default=8)
    p.add_argument("--batch_size", type=int, default=4)
    p.add_argument("--labeled_bs", type=int, default=2)
    p.add_argument("--base_lr", type=float, default=0.01)
    p.add_argument("--consistency", type=float, default=1.0)
    p.add_argument("--consistency_rampup", type=float, default=10.0)
    p.add_argument("--start_step1", type=int, default=1)
    p.add_argument("--start_step2", type=int, default=2)
    p.add_argument("--min_step", type=int, default=2)
    p.add_argument("--max_step", type=int, default=1)
    p.add_argument("--coefficient", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=1337)
    return p.parse_args([])


class ConvBlock(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.conv = nn.Conv2d(n_in, n_out, 3, padding=1)
        self.bn = nn.BatchNorm2d(n_out)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class SegNet(nn.Module):
    def __init__(self, n_channels=1, n_classes=2, n_filters=8, has_dropout=True):
        super().__init__()
        self.block_one = ConvBlock(n_channels, n_filters)
        self.block_two = ConvBlock(n_filters, 2 * n_filters)
        self.block_three = ConvBlock(2 * n_filters, n_filters)
        self.out_conv = nn.Conv2d(n_filters, n_classes, 1)
        self.dropout = nn.Dropout2d(0.3) if has_dropout else nn.Identity()

    def forward(self, x):
        x1 = self.block_one(x)
        x2 = self.block_two(F.max_pool2d(x1, 2))
        x3 = self.block_three(F.interpolate(x2, scale_factor=2.0, mode="nearest")) + x1
        return self.out_conv(self.dropout(x3))


class Linear_vector(nn.Module):
    def __init__(self, n_dim):
        super().__init__()
        self.paras = nn.Parameter(torch.eye(n_dim) + 0.01 * torch.randn(n_dim, n_dim))

    def forward(self, x):
        return torch.mm(self.paras, x)


def conv_weight_items(model):
    for name, parameters in model.named_parameters():
        if "conv" in name and "weight" in name and len(parameters.shape) == 4:
            yield name, parameters


def l_correlation_cos_mean(model1, model2, linear_paras1):    # fix model2
    total_loss, count = 0.0, 0
    for name, parameters in conv_weight_items(model1):
        w1 = parameters
        w2 = model2.state_dict()[name]
        w2 = w2.detach()
        outdim = parameters.shape[0]
        w1 = w1.view(outdim, -1)
        w2 = w2.view(outdim, -1)
        out = linear_paras1[count](w2)
        out = F.normalize(out, dim=1)
        w1_d = F.normalize(w1, dim=1)
        loss_temp = torch.einsum("nc,nc->n", out, w1_d)
        total_loss = total_loss + torch.mean(loss_temp * loss_temp)
        count += 1
    return total_loss / count


def dice_loss(score, target):
    target = target.float()
    smooth = 1e-5
    intersect = torch.sum(score * target)
    loss = (2 * intersect + smooth) / (torch.sum(score * score) + torch.sum(target * target) + smooth)
    return 1 - loss


def sigmoid_rampup(current, rampup_length):
    current = np.clip(current, 0.0, rampup_length)
    phase = 1.0 - current / rampup_length
    return float(np.exp(-5.0 * phase * phase))


class BlobDataset:
    """Images with one bright disk; the first `labeled_bs` of each batch keep masks."""

    def __init__(self, n, size=16, seed=0):
        g = torch.Generator().manual_seed(seed)
        yy, xx = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
        self.images, self.labels = [], []
        for _ in range(n):
            cy, cx = torch.randint(4, size - 4, (2,), generator=g)
            r = 2 + torch.rand(1, generator=g) * 3
            mask = ((yy - cy) ** 2 + (xx - cx) ** 2 <= r ** 2).long()
            img = mask.float() + 0.3 * torch.randn(size, size, generator=g)
            self.images.append(img[None])
            self.labels.append(mask)

    def batch(self, idx):
        return torch.stack([self.images[i] for i in idx]), torch.stack([self.labels[i] for i in idx])


class CPSCauSSLTrainer:
    def __init__(self, args):
        self.args = args
        self.model1, self.model2 = SegNet(), SegNet()
        self.optimizer1 = torch.optim.SGD(self.model1.parameters(), lr=args.base_lr,
                                          momentum=0.9, weight_decay=1e-4)
        self.optimizer2 = torch.optim.SGD(self.model2.parameters(), lr=args.base_lr,
                                          momentum=0.9, weight_decay=1e-4)
        dims = [p.shape[0] for _, p in conv_weight_items(self.model1)]
        self.linear_paras1 = nn.ModuleList([Linear_vector(d) for d in dims])
        self.linear_paras2 = nn.ModuleList([Linear_vector(d) for d in dims])
        self.linear_optimizer1 = torch.optim.Adam(self.linear_paras1.parameters(), 2e-2)
        self.linear_optimizer2 = torch.optim.Adam(self.linear_paras2.parameters(), 2e-2)
        self.iter_num, self.iter_num_max = 0, 0
        self.logs = []

    def consistency_weight(self):
        return self.args.consistency * sigmoid_rampup(self.iter_num, self.args.consistency_rampup)

    def maximise_independence(self):
        for _ in range(self.args.max_step):
            icm_loss1 = -l_correlation_cos_mean(self.model1, self.model2, self.linear_paras1)
            icm_loss2 = -l_correlation_cos_mean(self.model2, self.model1, self.linear_paras2)
            self.linear_optimizer1.zero_grad()
            self.linear_optimizer2.zero_grad()
            icm_loss1.backward()
            icm_loss2.backward()
            self.linear_optimizer1.step()
            self.linear_optimizer2.step()
            self.iter_num_max += 1

    def train_step(self, volume_batch, label_batch):
        args = self.args
        if self.iter_num > args.start_step1 and self.iter_num % args.min_step == 0:
            self.maximise_independence()
        lb = args.labeled_bs
        outputs1, outputs2 = self.model1(volume_batch), self.model2(volume_batch)
        soft1, soft2 = F.softmax(outputs1, dim=1), F.softmax(outputs2, dim=1)
        sup1 = 0.5 * (F.cross_entropy(outputs1[:lb], label_batch[:lb])
                      + dice_loss(soft1[:lb, 1], label_batch[:lb] == 1))
        sup2 = 0.5 * (F.cross_entropy(outputs2[:lb], label_batch[:lb])
                      + dice_loss(soft2[:lb, 1], label_batch[:lb] == 1))
        pseudo1 = torch.argmax(soft1[lb:].detach(), dim=1)
        pseudo2 = torch.argmax(soft2[lb:].detach(), dim=1)
        w = self.consistency_weight()
        cons1 = w * 0.3 * F.cross_entropy(outputs1[lb:], pseudo2)
        cons2 = w * 0.3 * F.cross_entropy(outputs2[lb:], pseudo1)
        if self.iter_num > args.start_step2 and self.iter_num_max > 0:
            icm_loss1 = l_correlation_cos_mean(self.model1, self.model2, self.linear_paras1)
            icm_loss2 = l_correlation_cos_mean(self.model2, self.model1, self.linear_paras2)
        else:
            icm_loss1 = icm_loss2 = 0
        loss1 = sup1 + cons1 + args.coefficient * icm_loss1
        loss2 = sup2 + cons2 + args.coefficient * icm_loss2

        self.optimizer1.zero_grad()
        loss1.backward()
        self.optimizer1.step()
        self.optimizer2.zero_grad()
        loss2.backward()  # raises
        self.optimizer2.step()

        self.iter_num += 1
        self.logs.append((loss1.item(), loss2.item()))
        return self.logs[-1]

    @torch.no_grad()
    def evaluate(self, images, labels):
        self.model1.eval()
        self.model2.eval()
        prob = (F.softmax(self.model1(images), 1) + F.softmax(self.model2(images), 1)) / 2
        pred = prob.argmax(1)
        inter = ((pred == 1) & (labels == 1)).sum().item()
        dice = 2 * inter / max((pred == 1).sum().item() + (labels == 1).sum().item(), 1)
        self.model1.train()
        self.model2.train()
        return dice


def main():
    args = parse_args()
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    train_set = BlobDataset(24, seed=0)
    labeled_idxs, unlabeled_idxs = list(range(6)), list(range(6, 24))
    trainer = CPSCauSSLTrainer(args)
    rng = random.Random(args.seed)
    while trainer.iter_num < args.max_iterations:
        idx = rng.sample(labeled_idxs, args.labeled_bs) + \
            rng.sample(unlabeled_idxs, args.batch_size - args.labeled_bs)
        l1, l2 = trainer.train_step(*train_set.batch(idx))
        print(f"iter {trainer.iter_num}: loss1 {l1:.4f} loss2 {l2:.4f}")
    val_x, val_y = BlobDataset(6, seed=5).batch(range(6))
    print("val dice:", round(trainer.evaluate(val_x, val_y), 4))


if __name__ == "__main__":
    main()
