# expect: clean
# source: https://github.com/MrChenFeng/Adaptive-Soft-Contrastive-Learning_ICPR2022/issues/2
"""Adaptive soft contrastive pre-training (MoCo / BYOL back-ends) with a kNN monitor."""
import argparse
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


def get_args():
    return argparse.Namespace(
        model="byol", type="ascl", dim=32, mem_size=64, m=0.99, T1=0.1, T2=0.05, nn_num=1,
        lr=0.06, warm_up=1, epochs=2, batch_size=16, n_train=64, n_test=32, knn_k=5, knn_t=0.1, seed=0,
    )


class TwoCropDataset(Dataset):
    def __init__(self, n, num_classes=4, size=16, seed=0, two_crop=True):
        g = torch.Generator().manual_seed(seed)
        self.targets = torch.arange(n) % num_classes
        self.images = 0.3 * torch.rand(n, 3, size, size, generator=g)
        for i, y in enumerate(self.targets.tolist()):
            self.images[i, y % 3, 2 * y:2 * y + 6, :] += 0.7
        self.two_crop = two_crop

    def __len__(self):
        return len(self.targets)

    def augment(self, x):
        shift = int(torch.randint(-2, 3, (1,)))
        x = torch.roll(x, shifts=shift, dims=2)
        if torch.rand(1).item() < 0.5:
            x = torch.flip(x, dims=[2])
        return x * (0.8 + 0.4 * torch.rand(1))

    def __getitem__(self, idx):
        img, target = self.images[idx], self.targets[idx]
        if self.two_crop:
            return [self.augment(img), self.augment(img)], target
        return img, target


class ModelBase(nn.Module):
    def __init__(self, projection_dim=128, width=16):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.Conv2d(width, 2 * width, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(2 * width),
            nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1), nn.Flatten(1))
        self.feat_dim = 2 * width
        self.projector = nn.Sequential(nn.Linear(self.feat_dim, 64), nn.ReLU(True), nn.Linear(64, projection_dim))

    def forward(self, x, feat=False):
        x = self.net(x)
        return x if feat else self.projector(x)


class ASCL(nn.Module):
    def __init__(self, model="moco", dim=128, mem_size=4096, m=0.99, T1=0.1, T2=0.05, type="ascl", nn_num=1):
        super().__init__()
        self.K, self.m, self.T1, self.T2 = mem_size, m, T1, T2
        self.type, self.model, self.nn_num = type, model, nn_num
        self.encoder_q = ModelBase(projection_dim=dim)
        self.encoder_k = ModelBase(projection_dim=dim)
        if self.model == "byol":
            self.predictor = nn.Sequential(nn.Linear(dim, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, dim))
        for param_q, param_k in zip(self.encoder_q.parameters(), self.encoder_k.parameters()):
            param_k.data.copy_(param_q.data)
            param_k.requires_grad = False
        self.max_entropy = np.log(self.K)
        self.register_buffer("queue", F.normalize(torch.randn(dim, self.K), dim=0))
        self.register_buffer("labels", -1 * torch.ones(self.K).long())
        self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))

    @torch.no_grad()
    def _momentum_update_key_encoder(self):
        for param_q, param_k in zip(self.encoder_q.parameters(), self.encoder_k.parameters()):
            param_k.data = param_k.data * self.m + param_q.data * (1.0 - self.m)

    @torch.no_grad()
    def _dequeue_and_enqueue(self, keys, labels):
        batch_size = keys.shape[0]
        ptr = int(self.queue_ptr)
        assert self.K % batch_size == 0
        self.queue[:, ptr:ptr + batch_size] = keys.t()
        self.labels[ptr:ptr + batch_size] = labels
        self.queue_ptr[0] = (ptr + batch_size) % self.K

    def _soft_labels(self, logits_pd):
        pseudo_labels = F.softmax(logits_pd, 1)
        entropy = -torch.sum(pseudo_labels * F.log_softmax(logits_pd, 1), dim=1, keepdim=True)
        c = 1 - entropy / math.log(logits_pd.shape[1])
        return torch.clamp(self.nn_num * c * pseudo_labels, max=1.0)

    def _forward_moco(self, im_q, im_k, targets):
        self._momentum_update_key_encoder()
        q = F.normalize(self.encoder_q(im_q), dim=1)
        with torch.no_grad():
            k = F.normalize(self.encoder_k(im_k), dim=1)
            logits_pd = torch.einsum("nc,ck->nk", [k, self.queue.clone().detach()]) / self.T2
            labels = torch.zeros(logits_pd.size(0), logits_pd.size(1) + 1)
            labels[:, 0] = 1.0
            if self.type == "ascl":
                labels[:, 1:] = self._soft_labels(logits_pd)
            labels = labels / labels.sum(dim=1, keepdim=True)
        l_pos = torch.einsum("nc,nc->n", [q, k]).unsqueeze(-1)
        l_neg = torch.einsum("nc,ck->nk", [q, self.queue.clone().detach()])
        logits = torch.cat([l_pos, l_neg], dim=1) / self.T1
        loss = -torch.sum(labels.detach() * F.log_softmax(logits, 1), 1).mean()
        self._dequeue_and_enqueue(k, targets)
        return loss

    def _forward_byol(self, im_q, im_k, targets):
        self._momentum_update_key_encoder()
        q = self.encoder_q(im_q)
        k = self.encoder_k(im_k)
        hq = F.normalize(self.predictor(q), dim=-1, p=2)
        k = F.normalize(k, dim=-1, p=2)
        if self.type == "ascl":
            with torch.no_grad():
                distk = torch.einsum("nc,ck->nk", [k, k.T])
                off_diag = ~torch.eye(distk.shape[0], dtype=torch.bool)
                logits_pd = distk[off_diag].reshape(distk.shape[0], -1) / self.T2
                labels = torch.zeros_like(distk)
                labels.fill_diagonal_(1)
                labels[off_diag] = self._soft_labels(logits_pd).reshape(-1)
                labels = labels / labels.sum(dim=1, keepdim=True)
            dist_real = torch.einsum("nc,ck->nk", [hq, k.T.detach()])
            loss = (2 - 2 * (labels.detach() * dist_real).sum(dim=-1)).mean()
        else:
            loss = (2 - 2 * (hq * k.detach()).sum(dim=-1)).mean()
        self._dequeue_and_enqueue(k.detach(), targets)
        return loss

    def forward(self, im_q, im_k, targets):
        if self.model == "byol":
            return self._forward_byol(im_q, im_k, targets)
        if self.model == "moco":
            return self._forward_moco(im_q, im_k, targets)
        raise ValueError(f"Wrong model! Should be moco or byol rather than {self.model}!")


class AverageMeter:
    def __init__(self, name):
        self.name, self.sum, self.count, self.avg = name, 0.0, 0, 0.0

    def update(self, val, n=1):
        self.sum += float(val) * n
        self.count += n
        self.avg = self.sum / self.count


def adjust_learning_rate(optimizer, warm_up, epoch, epochs, base_lr, i, iteration_per_epoch):
    T = epoch * iteration_per_epoch + i
    warmup_iters = warm_up * iteration_per_epoch
    total_iters = (epochs - warm_up) * iteration_per_epoch
    if epoch < warm_up:
        lr = base_lr * 1.0 * T / warmup_iters
    else:
        T = T - warmup_iters
        lr = 0.5 * base_lr * (1 + math.cos(1.0 * T / max(total_iters, 1) * math.pi))
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr


def train(net, data_loader, train_optimizer, epoch, args):
    net.train()
    total_loss = AverageMeter("loss")
    for i, ([im_1, im_2], targets) in enumerate(data_loader):
        adjust_learning_rate(train_optimizer, args.warm_up, epoch, args.epochs, args.lr, i, len(data_loader))
        loss = net(im_1, im_2, targets)
        train_optimizer.zero_grad()
        loss.backward()
        train_optimizer.step()
        total_loss.update(loss, im_1.size(0))
    return total_loss.avg


@torch.no_grad()
def online_test(net, memory_loader, test_loader, args):
    net.eval()
    feats, labels = [], []
    for img, target in memory_loader:
        feats.append(F.normalize(net(img, feat=True), dim=1))
        labels.append(target)
    feature_bank, feature_labels = torch.cat(feats), torch.cat(labels)
    n_classes = int(feature_labels.max()) + 1
    correct = total = 0
    for img, target in test_loader:
        feat = F.normalize(net(img, feat=True), dim=1)
        sim, idx = (feat @ feature_bank.t()).topk(args.knn_k, dim=-1)
        weights = (sim / args.knn_t).exp()
        one_hot = F.one_hot(feature_labels[idx], n_classes).float()
        pred = (one_hot * weights[..., None]).sum(1).argmax(1)
        correct += (pred == target).sum().item()
        total += target.numel()
    return correct / total


def main():
    args = get_args()
    torch.manual_seed(args.seed)
    train_loader = DataLoader(TwoCropDataset(args.n_train, seed=1), batch_size=args.batch_size, shuffle=True, drop_last=True)
    memory_loader = DataLoader(TwoCropDataset(args.n_train, seed=1, two_crop=False), batch_size=args.batch_size)
    test_loader = DataLoader(TwoCropDataset(args.n_test, seed=2, two_crop=False), batch_size=args.batch_size)
    model = ASCL(model=args.model, dim=args.dim, mem_size=args.mem_size, m=args.m, T1=args.T1, T2=args.T2,
                 type=args.type, nn_num=args.nn_num)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, weight_decay=5e-4, momentum=0.9)
    best_acc = 0.0
    for epoch in range(args.epochs):
        train_loss = train(model, train_loader, optimizer, epoch, args)
        cur_acc = online_test(model.encoder_q, memory_loader, test_loader, args)
        best_acc = max(best_acc, cur_acc)
        print(f"Epoch [{epoch}/{args.epochs}]: Best accuracy: {best_acc:.4f}! Current accuracy: {cur_acc:.4f} "
              f"Current loss: {train_loss:.4f}")


if __name__ == "__main__":
    main()
