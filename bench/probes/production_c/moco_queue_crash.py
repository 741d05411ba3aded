# expect: inplace_version
# source: https://github.com/facebookresearch/moco/issues/128
"""MoCo v1/v2 pre-training on toy vectors.

Re-implementation of moco/builder.py + main_moco.py stripped down to a
single process: a query encoder, a momentum key encoder and a FIFO queue
of negative keys kept as a buffer of the model.
"""
import math
import time
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class MocoConfig:
    dim: int = 32          # feature dimension
    K: int = 256           # queue size; number of negative keys
    m: float = 0.999       # moco momentum of updating key encoder
    T: float = 0.07        # softmax temperature
    mlp: bool = True       # use mlp head (MoCo v2)


@dataclass
class TrainConfig:
    in_dim: int = 48
    batch_size: int = 32
    epochs: int = 2
    iters_per_epoch: int = 4
    lr: float = 0.03
    momentum: float = 0.9
    weight_decay: float = 1e-4
    cos: bool = True
    print_freq: int = 2
    moco: MocoConfig = field(default_factory=MocoConfig)


class Backbone(nn.Module):
    """Small stand-in for a ResNet trunk with a replaceable fc head."""

    def __init__(self, in_dim, num_classes):
        super().__init__()
        self.trunk = nn.Sequential(
            nn.Linear(in_dim, 128), nn.BatchNorm1d(128), nn.ReLU(inplace=True),
            nn.Linear(128, 128), nn.BatchNorm1d(128), nn.ReLU(inplace=True),
        )
        self.fc = nn.Linear(128, num_classes)

    def forward(self, x):
        return self.fc(self.trunk(x))


class MoCo(nn.Module):
    """
    Build a MoCo model with: a query encoder, a key encoder, and a queue
    https://arxiv.org/abs/1911.05722
    """

    def __init__(self, base_encoder, cfg: MocoConfig, in_dim: int):
        super().__init__()
        self.K = cfg.K
        self.m = cfg.m
        self.T = cfg.T

        self.encoder_q = base_encoder(in_dim, cfg.dim)
        self.encoder_k = base_encoder(in_dim, cfg.dim)

        if cfg.mlp:  # hack: brute-force replacement
            dim_mlp = self.encoder_q.fc.weight.shape[1]
            self.encoder_q.fc = nn.Sequential(nn.Linear(dim_mlp, dim_mlp), nn.ReLU(), self.encoder_q.fc)
            self.encoder_k.fc = nn.Sequential(nn.Linear(dim_mlp, dim_mlp), nn.ReLU(), self.encoder_k.fc)

        for param_q, param_k in zip(self.encoder_q.parameters(), self.encoder_k.parameters()):
            param_k.data.copy_(param_q.data)  # initialize
            param_k.requires_grad = False  # not update by gradient

        # create the queue
        self.register_buffer("queue", torch.randn(cfg.dim, cfg.K))
        self.queue = nn.functional.normalize(self.queue, dim=0)
        self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))

    @torch.no_grad()
    def _momentum_update_key_encoder(self):
        """Momentum update of the key encoder"""
        for param_q, param_k in zip(self.encoder_q.parameters(), self.encoder_k.parameters()):
            param_k.data = param_k.data * self.m + param_q.data * (1.0 - self.m)

    @torch.no_grad()
    def _dequeue_and_enqueue(self, keys):
        batch_size = keys.shape[0]
        ptr = int(self.queue_ptr)
        assert self.K % batch_size == 0  # for simplicity

        # replace the keys at ptr (dequeue and enqueue)
        self.queue[:, ptr:ptr + batch_size] = keys.T
        ptr = (ptr + batch_size) % self.K  # move pointer
        self.queue_ptr[0] = ptr

    def forward(self, im_q, im_k):
        # compute query features
        q = self.encoder_q(im_q)  # queries: NxC
        q = nn.functional.normalize(q, dim=1)

        # compute key features
        with torch.no_grad():  # no gradient to keys
            self._momentum_update_key_encoder()  # update the key encoder
            k = self.encoder_k(im_k)  # keys: NxC
            k = nn.functional.normalize(k, dim=1)

        # positive logits: Nx1
        l_pos = torch.einsum("nc,nc->n", [q, k]).unsqueeze(-1)
        # negative logits: NxK
        l_neg = torch.einsum("nc,ck->nk", [q, self.queue])

        logits = torch.cat([l_pos, l_neg], dim=1)
        logits /= self.T
        labels = torch.zeros(logits.shape[0], dtype=torch.long)

        # dequeue and enqueue
        self._dequeue_and_enqueue(k)
        return logits, labels


class TwoCropsTransform:
    """Take two random crops of one image as the query and key."""

    def __init__(self, noise=0.1, drop=0.2):
        self.noise = noise
        self.drop = drop

    def _aug(self, x):
        mask = (torch.rand_like(x) > self.drop).float()
        return x * mask + self.noise * torch.randn_like(x)

    def __call__(self, x):
        return [self._aug(x), self._aug(x)]


class AverageMeter:
    def __init__(self, name):
        self.name, self.sum, self.count = name, 0.0, 0

    def update(self, val, n=1):
        self.sum += val * n
        self.count += n

    @property
    def avg(self):
        return self.sum / max(self.count, 1)


def adjust_learning_rate(optimizer, epoch, cfg: TrainConfig):
    lr = cfg.lr
    if cfg.cos:
        lr *= 0.5 * (1.0 + math.cos(math.pi * epoch / cfg.epochs))
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr


def train(model, criterion, optimizer, epoch, cfg: TrainConfig, transform):
    losses = AverageMeter("Loss")
    model.train()
    end = time.time()
    for i in range(cfg.iters_per_epoch):
        images = transform(torch.randn(cfg.batch_size, cfg.in_dim))
        output, target = model(im_q=images[0], im_k=images[1])
        loss = criterion(output, target)
        losses.update(loss.item(), images[0].size(0))

        optimizer.zero_grad()
        loss.backward()  # raises
        optimizer.step()

        if i % cfg.print_freq == 0:
            print(f"Epoch [{epoch}][{i}/{cfg.iters_per_epoch}] loss {losses.avg:.4f} "
                  f"time {time.time() - end:.3f}")
        end = time.time()


def main():
    cfg = TrainConfig()
    torch.manual_seed(0)
    model = MoCo(Backbone, cfg.moco, cfg.in_dim)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(
        [p for p in model.parameters() if p.requires_grad],
        cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay,
    )
    transform = TwoCropsTransform()
    for epoch in range(cfg.epochs):
        adjust_learning_rate(optimizer, epoch, cfg)
        train(model, criterion, optimizer, epoch, cfg, transform)
    print("queue ptr", int(model.queue_ptr))


if __name__ == "__main__":
    main()
