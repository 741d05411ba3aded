# expect: freed_graph
# source: https://github.com/chxy95/Deep-Mutual-Learning/issues/5
"""Deep mutual learning: a cohort of peer students distilling into each other, plus an EMA teacher."""
import copy
import time
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class DMLConfig:
    num_peers: int = 2
    in_dim: int = 32
    num_classes: int = 10
    widths: list = field(default_factory=lambda: [64, 48])
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 5e-4
    temperature: float = 1.0
    kl_weight: float = 1.0
    ema_decay: float = 0.99
    batch_size: int = 32
    steps_per_epoch: int = 4
    epochs: int = 2
    seed: int = 0


class PeerNet(nn.Module):
    def __init__(self, in_dim, width, num_classes, dropout=0.1):
        super().__init__()
        self.features = nn.Sequential(
            nn.Linear(in_dim, width),
            nn.BatchNorm1d(width),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(width, width),
            nn.ReLU(),
        )
        self.classifier = nn.Linear(width, num_classes)

    def forward(self, x):
        return self.classifier(self.features(x))


class EMATeacher:
    def __init__(self, model, decay):
        self.module = copy.deepcopy(model).eval()
        for p in self.module.parameters():
            p.requires_grad_(False)
        self.decay = decay

    @torch.no_grad()
    def update(self, model):
        msd = model.state_dict()
        for k, v in self.module.state_dict().items():
            if v.dtype.is_floating_point:
                v.mul_(self.decay).add_(msd[k].detach(), alpha=1 - self.decay)
            else:
                v.copy_(msd[k])


class SyntheticClusters:
    def __init__(self, cfg):
        g = torch.Generator().manual_seed(cfg.seed)
        self.centers = torch.randn(cfg.num_classes, cfg.in_dim, generator=g) * 2.0
        self.cfg = cfg

    def batch(self):
        y = torch.randint(0, self.cfg.num_classes, (self.cfg.batch_size,))
        x = self.centers[y] + torch.randn(self.cfg.batch_size, self.cfg.in_dim)
        return x, y


class MutualLearner:
    def __init__(self, cfg):
        self.cfg = cfg
        self.peers = [PeerNet(cfg.in_dim, cfg.widths[i % len(cfg.widths)], cfg.num_classes)
                      for i in range(cfg.num_peers)]
        self.optimizers = [torch.optim.SGD(p.parameters(), lr=cfg.lr, momentum=cfg.momentum,
                                           weight_decay=cfg.weight_decay, nesterov=True)
                           for p in self.peers]
        self.teacher = EMATeacher(self.peers[0], cfg.ema_decay)
        self.ce = nn.CrossEntropyLoss()
        self._logits = {}
        self.log = []

    def _forward_all(self, x):
        self._logits = {i: peer(x) for i, peer in enumerate(self.peers)}

    def _peer_distribution(self, j):
        return F.softmax(self._logits[j] / self.cfg.temperature, dim=1)

    def _mimicry_loss(self, i):
        T = self.cfg.temperature
        log_p = F.log_softmax(self._logits[i] / T, dim=1)
        kl = 0.0
        for j in range(len(self.peers)):
            if j == i:
                continue
            kl = kl + F.kl_div(log_p, self._peer_distribution(j), reduction="batchmean") * T * T
        return kl / (len(self.peers) - 1)

    def step(self, x, y):
        for peer in self.peers:
            peer.train()
        self._forward_all(x)
        stats = {}
        for i, (peer, opt) in enumerate(zip(self.peers, self.optimizers)):
            ce_loss = self.ce(self._logits[i], y)
            kl_loss = self._mimicry_loss(i)
            loss = ce_loss + self.cfg.kl_weight * kl_loss
            opt.zero_grad()
            loss.backward()  # raises
            opt.step()
            stats["peer%d/ce" % i] = ce_loss.item()
            stats["peer%d/kl" % i] = float(kl_loss)
        self.teacher.update(self.peers[0])
        return stats

    @torch.no_grad()
    def evaluate(self, data, n_batches=3):
        accs = [0.0] * (len(self.peers) + 1)
        models = self.peers + [self.teacher.module]
        for m in models:
            m.eval()
        for _ in range(n_batches):
            x, y = data.batch()
            for k, m in enumerate(models):
                accs[k] += (m(x).argmax(1) == y).float().mean().item() / n_batches
        return accs


def main():
    cfg = DMLConfig()
    torch.manual_seed(cfg.seed)
    data = SyntheticClusters(cfg)
    learner = MutualLearner(cfg)
    t0 = time.time()
    for epoch in range(cfg.epochs):
        for it in range(cfg.steps_per_epoch):
            x, y = data.batch()
            stats = learner.step(x, y)
            learner.log.append(stats)
        accs = learner.evaluate(data)
        print("epoch %d  %s  acc=%s" % (epoch, ", ".join("%s=%.3f" % kv for kv in stats.items()),
                                         ["%.2f" % a for a in accs]))
    print("done in %.2fs" % (time.time() - t0))


if __name__ == "__main__":
    main()
