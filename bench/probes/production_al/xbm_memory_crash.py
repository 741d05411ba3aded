# expect: freed_graph
# source: https://github.com/msight-tech/research-xbm/issues/6
"""Deep metric learning with a Cross-Batch Memory (XBM), in the layout of the
research-xbm ret_benchmark: a yacs-like nested config, a BN-Inception-style
backbone with a linear-norm embedding head, a multi-similarity loss, an XBM
queue of past embeddings, a do_train loop with validation (Recall@K / MAP@R
computed by a feature extractor) and a warm-up + step learning-rate schedule.
Synthetic clustered images replace CUB/SOP."""
import datetime
import time
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)


def make_cfg():
    cfg = SimpleNamespace()
    cfg.MODEL = SimpleNamespace(HEAD=SimpleNamespace(DIM=32), WIDTH=16)
    cfg.SOLVER = SimpleNamespace(MAX_ITERS=6, BASE_LR=3e-4, WEIGHT_DECAY=5e-4,
                                 WARMUP_ITERS=2, STEPS=(4,), GAMMA=0.1)
    cfg.XBM = SimpleNamespace(ENABLE=True, SIZE=64, WEIGHT=1.0, START_ITERATION=1)
    cfg.LOSSES = SimpleNamespace(MULTI_SIMILARITY_LOSS=SimpleNamespace(
        SCALE_POS=2.0, SCALE_NEG=40.0, HARD_MINING=True))
    cfg.DATA = SimpleNamespace(NUM_CLASSES=8, NUM_INSTANCES=4, IMG=16)
    cfg.VALIDATION = SimpleNamespace(VERBOSE=3)
    return cfg


# ---------------------------------------------------------------- data
class RandomIdentityLoader:
    """P classes x K instances per batch, like RandomIdentitySampler."""

    def __init__(self, cfg, n_per_class=12, seed=0):
        g = torch.Generator().manual_seed(seed)
        c, s = cfg.DATA.NUM_CLASSES, cfg.DATA.IMG
        self.protos = torch.randn(c, 3, s, s, generator=g)
        self.images = (self.protos.repeat_interleave(n_per_class, 0)
                       + 0.5 * torch.randn(c * n_per_class, 3, s, s, generator=g))
        self.labels = torch.arange(c).repeat_interleave(n_per_class)
        self.k = cfg.DATA.NUM_INSTANCES
        self.p = 4
        self.rng = np.random.RandomState(seed)

    def __iter__(self):
        while True:
            classes = self.rng.choice(int(self.labels.max()) + 1, self.p, replace=False)
            idx = []
            for c in classes:
                pool = np.where(self.labels.numpy() == c)[0]
                idx.extend(self.rng.choice(pool, self.k, replace=False).tolist())
            idx = torch.tensor(idx)
            yield self.images[idx], self.labels[idx], idx


# ---------------------------------------------------------------- model
class InceptionLite(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU())
        self.b1 = nn.Conv2d(width, width, 1)
        self.b3 = nn.Conv2d(width, width, 3, padding=1)
        self.bn = nn.BatchNorm2d(2 * width)
        self.out_channels = 2 * width

    def forward(self, x):
        x = self.stem(x)
        x = torch.cat([self.b1(x), self.b3(x)], 1)
        x = F.relu(self.bn(x))
        return F.adaptive_max_pool2d(x, 1).flatten(1)


class LinearNorm(nn.Module):
    def __init__(self, in_channels, dim):
        super().__init__()
        self.fc = nn.Linear(in_channels, dim)

    def forward(self, x):
        return F.normalize(self.fc(x), dim=1)


class RetrievalModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.backbone = InceptionLite(cfg.MODEL.WIDTH)
        self.head = LinearNorm(self.backbone.out_channels, cfg.MODEL.HEAD.DIM)

    def forward(self, x):
        return self.head(self.backbone(x))


# ---------------------------------------------------------------- losses / memory
class MultiSimilarityLoss(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        ms = cfg.LOSSES.MULTI_SIMILARITY_LOSS
        self.thresh, self.margin = 0.5, 0.1
        self.scale_pos, self.scale_neg = ms.SCALE_POS, ms.SCALE_NEG
        self.hard_mining = ms.HARD_MINING

    def forward(self, inputs_col, targets_col, inputs_row, targets_row):
        sim_mat = torch.matmul(inputs_col, inputs_row.t())
        loss = []
        for i in range(inputs_col.size(0)):
            pos = sim_mat[i][targets_row == targets_col[i]]
            pos = pos[pos < 1 - 1e-5]
            neg = sim_mat[i][targets_row != targets_col[i]]
            if len(pos) == 0 or len(neg) == 0:
                continue
            if self.hard_mining:
                neg = neg[neg + self.margin > pos.min()]
                pos = pos[pos - self.margin < neg.max()] if len(neg) else pos
            if len(neg) == 0 or len(pos) == 0:
                continue
            pos_loss = 1.0 / self.scale_pos * torch.log(1 + torch.sum(torch.exp(-self.scale_pos * (pos - self.thresh))))
            neg_loss = 1.0 / self.scale_neg * torch.log(1 + torch.sum(torch.exp(self.scale_neg * (neg - self.thresh))))
            loss.append(pos_loss + neg_loss)
        if len(loss) == 0:
            return inputs_col.sum() * 0.0
        return sum(loss) / inputs_col.size(0)


class XBM:
    def __init__(self, cfg):
        self.K = cfg.XBM.SIZE
        self.feats = torch.zeros(self.K, cfg.MODEL.HEAD.DIM)
        self.targets = torch.zeros(self.K, dtype=torch.long)
        self.ptr = 0

    @property
    def is_full(self):
        return self.targets[-1].item() != 0

    def get(self):
        if self.is_full:
            return self.feats, self.targets
        return self.feats[:self.ptr], self.targets[:self.ptr]

    def enqueue_dequeue(self, feats, targets):
        q_size = len(targets)
        if self.ptr + q_size > self.K:
            self.feats[-q_size:] = feats
            self.targets[-q_size:] = targets
            self.ptr = 0
        else:
            self.feats[self.ptr: self.ptr + q_size] = feats
            self.targets[self.ptr: self.ptr + q_size] = targets
            self.ptr += q_size


# ---------------------------------------------------------------- solver / eval
def build_optimizer(cfg, model):
    params = [{"params": model.backbone.parameters(), "lr": cfg.SOLVER.BASE_LR},
              {"params": model.head.parameters(), "lr": cfg.SOLVER.BASE_LR * 10}]
    return torch.optim.AdamW(params, weight_decay=cfg.SOLVER.WEIGHT_DECAY)


def build_scheduler(cfg, optimizer):
    def factor(it):
        if it < cfg.SOLVER.WARMUP_ITERS:
            return (it + 1) / cfg.SOLVER.WARMUP_ITERS
        return cfg.SOLVER.GAMMA ** sum(it >= s for s in cfg.SOLVER.STEPS)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


@torch.no_grad()
def feat_extractor(model, loader):
    model.eval()
    feats = model(loader.images).numpy()
    model.train()
    return feats


def recall_at_k(feats, labels, k=1):
    sim = feats @ feats.T
    np.fill_diagonal(sim, -np.inf)
    nn_idx = np.argsort(-sim, axis=1)[:, :k]
    return float(np.mean([labels[i] in labels[nn_idx[i]] for i in range(len(labels))]))


log_info = {}


def do_train(cfg, model, train_loader, optimizer, scheduler, criterion, logger=print):
    logger("Start training")
    max_iter = cfg.SOLVER.MAX_ITERS
    best_r1, best_iteration = 0.0, -1
    start_training_time = time.time()
    if cfg.XBM.ENABLE:
        logger(">>> use XBM")
        xbm = XBM(cfg)
    iteration = 0
    _train_loader = iter(train_loader)
    while iteration < max_iter:
        images, targets, indices = next(_train_loader)
        if iteration % cfg.VALIDATION.VERBOSE == 0 and iteration > 0:
            feats = feat_extractor(model, train_loader)
            r1 = recall_at_k(feats, train_loader.labels.numpy())
            log_info["R@1"] = r1
            if r1 > best_r1:
                best_r1, best_iteration = r1, iteration
            logger(f"Validation iter {iteration}: R@1 {r1:.3f}")
        model.train()
        iteration += 1
        feats = model(images)

        if cfg.XBM.ENABLE and iteration > cfg.XBM.START_ITERATION:
            xbm.enqueue_dequeue(feats, targets)

        loss = criterion(feats, targets, feats, targets)
        log_info["batch_loss"] = loss.item()

        if cfg.XBM.ENABLE and iteration > cfg.XBM.START_ITERATION:
            xbm_feats, xbm_targets = xbm.get()
            xbm_loss = criterion(feats, targets, xbm_feats, xbm_targets)
            log_info["xbm_loss"] = xbm_loss.item()
            loss = loss + cfg.XBM.WEIGHT * xbm_loss

        optimizer.zero_grad()
        loss.backward()  # raises
        optimizer.step()
        scheduler.step()
        logger(f"iter: {iteration}  loss: {loss.item():.4f}  lr: {optimizer.param_groups[0]['lr']:.6f}")
        del feats
        del loss
    total = str(datetime.timedelta(seconds=int(time.time() - start_training_time)))
    logger(f"Total training time: {total}; best iteration {best_iteration} R@1 {best_r1:.3f}")
    return best_r1


def main():
    cfg = make_cfg()
    model = RetrievalModel(cfg)
    loader = RandomIdentityLoader(cfg)
    optimizer = build_optimizer(cfg, model)
    scheduler = build_scheduler(cfg, optimizer)
    criterion = MultiSimilarityLoss(cfg)
    do_train(cfg, model, loader, optimizer, scheduler, criterion)


if __name__ == "__main__":
    main()
