# expect: clean
# source: https://github.com/ChenHongruixuan/ChangeMamba/issues/26
"""Semantic change detection training (MambaSCD-style trainer), CE + Lovasz-Softmax."""
from dataclasses import dataclass
from itertools import filterfalse as ifilterfalse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.autograd import Variable
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, Dataset


# --------------------------------------------------- utils_func/lovasz_loss.py
def lovasz_grad(gt_sorted):
    """Computes gradient of the Lovasz extension w.r.t sorted errors (Alg. 1)."""
    p = len(gt_sorted)
    gts = gt_sorted.sum()
    intersection = gts - gt_sorted.float().cumsum(0)
    union = gts + (1 - gt_sorted).float().cumsum(0)
    jaccard = 1. - intersection / union
    if p > 1:  # cover 1-pixel case
        jaccard[1:p] = jaccard[1:p] - jaccard[0:-1]
    return jaccard


def isnan(x):
    return x != x


def mean(l, ignore_nan=False, empty=0):
    """nanmean compatible with generators."""
    l = iter(l)
    if ignore_nan:
        l = ifilterfalse(isnan, l)
    try:
        n = 1
        acc = next(l)
    except StopIteration:
        if empty == 'raise':
            raise ValueError('Empty mean')
        return empty
    for n, v in enumerate(l, 2):
        acc += v
    if n == 1:
        return acc
    return acc / n


def flatten_probas(probas, labels, ignore=None):
    """Flattens predictions in the batch."""
    B, C, H, W = probas.size()
    probas = probas.permute(0, 2, 3, 1).contiguous().view(-1, C)  # B * H * W, C = P, C
    labels = labels.view(-1)
    if ignore is None:
        return probas, labels
    valid = (labels != ignore)
    vprobas = probas[valid.nonzero().squeeze()]
    vlabels = labels[valid]
    return vprobas, vlabels


def lovasz_softmax_flat(probas, labels, classes='present'):
    """Multi-class Lovasz-Softmax loss. probas: [P, C], labels: [P]."""
    if probas.numel() == 0:
        # only void pixels, the gradients should be 0
        return probas.sum() * 0.
    C = probas.size(1)
    losses = []
    class_to_sum = list(range(C)) if classes in ['all', 'present'] else classes
    for c in class_to_sum:
        fg = (labels == c).float()  # foreground for class c
        if classes == 'present' and fg.sum() == 0:
            continue
        class_pred = probas[:, c]
        errors = (Variable(fg) - class_pred).abs()
        errors_sorted, perm = torch.sort(errors, 0, descending=True)
        fg_sorted = fg[perm.data]
        losses.append(torch.dot(errors_sorted, Variable(lovasz_grad(fg_sorted))))
    return mean(losses)


def lovasz_softmax(probas, labels, classes='present', per_image=False, ignore=None):
    if per_image:
        return mean(lovasz_softmax_flat(*flatten_probas(p.unsqueeze(0), l.unsqueeze(0), ignore), classes=classes)
                    for p, l in zip(probas, labels))
    return lovasz_softmax_flat(*flatten_probas(probas, labels, ignore), classes=classes)


# --------------------------------------------------------------- data / model
class SemanticChangeDetectionDataset(Dataset):
    """Bi-temporal tiles with a change mask and land-cover maps for both dates."""

    def __init__(self, n_tiles=8, size=16, n_classes=7, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.items = []
        for i in range(n_tiles):
            pre = torch.randn(3, size, size, generator=g)
            post = pre.clone()
            cd = torch.zeros(size, size, dtype=torch.long)
            t1 = torch.zeros(size, size, dtype=torch.long)
            t2 = torch.zeros(size, size, dtype=torch.long)
            if i not in (2, 3):
                r = int(torch.randint(2, size - 6, (1,), generator=g))
                post[:, r:r + 5, r:r + 5] += 1.5
                cd[r:r + 5, r:r + 5] = 1
                t1[r:r + 5, r:r + 5] = int(torch.randint(1, n_classes, (1,), generator=g))
                t2[r:r + 5, r:r + 5] = int(torch.randint(1, n_classes, (1,), generator=g))
            self.items.append((pre, post, cd, t1, t2, f"tile_{i:03d}"))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, idx):
        return self.items[idx]


class STMambaSCD(nn.Module):
    """Tiny stand-in: shared encoder, change head and two semantic heads."""

    def __init__(self, output_cd=2, output_clf=7, dims=16):
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv2d(3, dims, 3, padding=1), nn.ReLU(),
                                     nn.Conv2d(dims, dims, 3, padding=1), nn.ReLU())
        self.cd_head = nn.Conv2d(2 * dims, output_cd, 1)
        self.clf_head = nn.Conv2d(dims, output_clf, 1)

    def forward(self, pre, post):
        f1, f2 = self.encoder(pre), self.encoder(post)
        return self.cd_head(torch.cat([f1, f2], 1)), self.clf_head(f1), self.clf_head(f2)


@dataclass
class Args:
    batch_size: int = 2
    learning_rate: float = 1e-4
    weight_decay: float = 5e-4
    max_iters: int = 8
    num_classes: int = 7


class Trainer(object):
    def __init__(self, args: Args):
        self.args = args
        self.train_data_loader = DataLoader(SemanticChangeDetectionDataset(n_classes=args.num_classes),
                                            batch_size=args.batch_size, shuffle=False)
        self.deep_model = STMambaSCD(output_cd=2, output_clf=args.num_classes)
        self.optim = optim.AdamW(self.deep_model.parameters(), lr=args.learning_rate,
                                 weight_decay=args.weight_decay)
        self.scheduler = StepLR(self.optim, step_size=10000, gamma=0.5)

    def compute_losses(self, output_1, output_semantic_t1, output_semantic_t2,
                       label_cd, label_clf_t1, label_clf_t2):
        ce_loss_cd = F.cross_entropy(output_1, label_cd, ignore_index=255)
        lovasz_loss_cd = lovasz_softmax(F.softmax(output_1, dim=1), label_cd, ignore=255)

        ce_loss_clf_t1 = F.cross_entropy(output_semantic_t1, label_clf_t1, ignore_index=255)
        lovasz_loss_clf_t1 = lovasz_softmax(F.softmax(output_semantic_t1, dim=1), label_clf_t1, ignore=255)

        ce_loss_clf_t2 = F.cross_entropy(output_semantic_t2, label_clf_t2, ignore_index=255)
        lovasz_loss_clf_t2 = lovasz_softmax(F.softmax(output_semantic_t2, dim=1), label_clf_t2, ignore=255)

        # Mask for similarity loss (label == 255)
        similarity_mask = (label_clf_t1 == 255).float().unsqueeze(1).expand_as(output_semantic_t1)
        similarity_loss = F.mse_loss(F.softmax(output_semantic_t1, dim=1) * similarity_mask,
                                     F.softmax(output_semantic_t2, dim=1) * similarity_mask, reduction='mean')

        main_loss = ce_loss_cd + 0.5 * (ce_loss_clf_t1 + ce_loss_clf_t2 + 0.5 * similarity_loss) \
            + 0.75 * (lovasz_loss_cd + 0.5 * (lovasz_loss_clf_t1 + lovasz_loss_clf_t2))
        return main_loss, ce_loss_cd + lovasz_loss_cd

    def training(self):
        self.deep_model.train()
        for itera, data in enumerate(self.train_data_loader):
            pre_change_imgs, post_change_imgs, label_cd, label_clf_t1, label_clf_t2, _ = data
            label_cd = label_cd.long()
            label_clf_t1 = label_clf_t1.long()
            label_clf_t2 = label_clf_t2.long()

            label_clf_t1[label_clf_t1 == 0] = 255
            label_clf_t2[label_clf_t2 == 0] = 255

            output_1, output_semantic_t1, output_semantic_t2 = self.deep_model(pre_change_imgs, post_change_imgs)

            self.optim.zero_grad()
            final_loss, cd_loss = self.compute_losses(output_1, output_semantic_t1, output_semantic_t2,
                                                      label_cd, label_clf_t1, label_clf_t2)
            final_loss.backward()

            self.optim.step()
            self.scheduler.step()
            print(f'iter is {itera + 1}, change detection loss is {float(cd_loss):.4f}')


def main():
    torch.manual_seed(0)
    np.random.seed(0)
    trainer = Trainer(Args())
    trainer.training()


if __name__ == "__main__":
    main()
