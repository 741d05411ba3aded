# expect: no_grad_fn
# source: https://github.com/liorshk/facenet_pytorch/issues/6
"""FaceNet-style embedding training with online hard-triplet selection (synthetic identities)."""
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CFG = {
    "model": {"in_dim": 48, "embedding_size": 32, "num_classes": 12, "alpha": 10.0},
    "loss": {"margin": 0.5, "cls_weight": 0.0},
    "optim": {"name": "adagrad", "lr": 0.1, "lr_decay": 1e-4, "wd": 0.0},
    "data": {"batch_size": 24, "n_batches": 5, "noise": 0.7},
    "log_interval": 1,
    "seed": 0,
}


class PairwiseDistance(nn.Module):
    def __init__(self, p=2, eps=1e-4):
        super().__init__()
        self.norm = p
        self.eps = eps

    def forward(self, x1, x2):
        diff = torch.abs(x1 - x2)
        out = torch.pow(diff, self.norm).sum(dim=1)
        return torch.pow(out + self.eps, 1.0 / self.norm)


class TripletMarginLoss(nn.Module):
    def __init__(self, margin):
        super().__init__()
        self.margin = margin
        self.pdist = PairwiseDistance(2)

    def forward(self, anchor, positive, negative):
        d_p = self.pdist(anchor, positive)
        d_n = self.pdist(anchor, negative)
        return torch.clamp(self.margin + d_p - d_n, min=0.0).mean()


class FaceModel(nn.Module):
    def __init__(self, in_dim, embedding_size, num_classes, alpha):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Linear(in_dim, 64), nn.BatchNorm1d(64), nn.ReLU(),
            nn.Linear(64, 64), nn.ReLU(),
        )
        self.embed = nn.Linear(64, embedding_size)
        self.classifier = nn.Linear(embedding_size, num_classes)
        self.alpha = alpha

    def forward(self, x):
        features = F.normalize(self.embed(self.backbone(x)), p=2, dim=1)
        return features * self.alpha

    def forward_classifier(self, x):
        return self.classifier(self.forward(x))


class TripletSource:
    """Anchor/positive share an identity; negative comes from a different one."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.identities = torch.randn(cfg["model"]["num_classes"], cfg["model"]["in_dim"])

    def __iter__(self):
        d = self.cfg["data"]
        n_cls = self.identities.size(0)
        for _ in range(d["n_batches"]):
            label_p = torch.randint(0, n_cls, (d["batch_size"],))
            label_n = (label_p + torch.randint(1, n_cls, (d["batch_size"],))) % n_cls
            data_a = self.identities[label_p] + d["noise"] * torch.randn(d["batch_size"], self.identities.size(1))
            data_p = self.identities[label_p] + d["noise"] * torch.randn(d["batch_size"], self.identities.size(1))
            data_n = self.identities[label_n] + d["noise"] * torch.randn(d["batch_size"], self.identities.size(1))
            yield data_a, data_p, data_n, label_p, label_n


class TripletTrainer:
    def __init__(self, cfg):
        self.cfg = cfg
        m = cfg["model"]
        self.model = FaceModel(m["in_dim"], m["embedding_size"], m["num_classes"], m["alpha"])
        self.l2_dist = PairwiseDistance(2)
        self.triplet_loss = TripletMarginLoss(cfg["loss"]["margin"])
        self.criterion = nn.CrossEntropyLoss()
        o = cfg["optim"]
        self.optimizer = torch.optim.Adagrad(self.model.parameters(), lr=o["lr"],
                                             lr_decay=o["lr_decay"], weight_decay=o["wd"])
        self.history = []

    def select_hard_triplets(self, out_a, out_p, out_n):
        d_p = self.l2_dist(out_a, out_p)
        d_n = self.l2_dist(out_a, out_n)
        mask = (d_n - d_p < self.cfg["loss"]["margin"]).cpu().data.numpy().flatten()
        hard = np.where(mask == 1)
        if len(hard[0]) == 0:
            return None, hard
        sel_a = torch.from_numpy(out_a.cpu().data.numpy()[hard])
        sel_p = torch.from_numpy(out_p.cpu().data.numpy()[hard])
        sel_n = torch.from_numpy(out_n.cpu().data.numpy()[hard])
        return (sel_a, sel_p, sel_n), hard

    def train_epoch(self, loader, epoch):
        self.model.train()
        cls_weight = self.cfg["loss"]["cls_weight"]
        for batch_idx, (data_a, data_p, data_n, label_p, label_n) in enumerate(loader):
            out_a, out_p, out_n = self.model(data_a), self.model(data_p), self.model(data_n)
            selected, hard = self.select_hard_triplets(out_a, out_p, out_n)
            if selected is None:
                continue
            triplet_loss = self.triplet_loss(*selected)
            loss = triplet_loss
            if cls_weight > 0:
                idx = torch.from_numpy(hard[0])
                logits = torch.cat([self.model.forward_classifier(data_a[idx]),
                                    self.model.forward_classifier(data_p[idx]),
                                    self.model.forward_classifier(data_n[idx])])
                labels = torch.cat([label_p[idx], label_p[idx], label_n[idx]])
                loss = loss + cls_weight * self.criterion(logits, labels)
            self.optimizer.zero_grad()
            loss.backward()  # raises
            self.optimizer.step()
            self.history.append(loss.item())
            if batch_idx % self.cfg["log_interval"] == 0:
                print("Train Epoch: %d [%d]  loss %.4f  selected triplets %d" % (
                    epoch, batch_idx, loss.item(), len(hard[0])))

    @torch.no_grad()
    def evaluate(self, loader):
        self.model.eval()
        dists, labels = [], []
        for data_a, data_p, data_n, _, _ in loader:
            a, p, n = self.model(data_a), self.model(data_p), self.model(data_n)
            dists += [self.l2_dist(a, p), self.l2_dist(a, n)]
            labels += [torch.ones(len(a)), torch.zeros(len(a))]
        dists, labels = torch.cat(dists), torch.cat(labels)
        thr = dists.median()
        return ((dists < thr).float() == labels).float().mean().item()


def main():
    torch.manual_seed(CFG["seed"])
    np.random.seed(CFG["seed"])
    source = TripletSource(CFG)
    trainer = TripletTrainer(CFG)
    t0 = time.time()
    for epoch in range(2):
        trainer.train_epoch(source, epoch)
        print("epoch %d verification accuracy %.3f" % (epoch, trainer.evaluate(source)))
    print("elapsed %.2fs" % (time.time() - t0))


if __name__ == "__main__":
    main()
