# expect: freed_graph
# source: https://github.com/davda54/sam/issues/10
"""Multi-task chest X-ray classifier trained with Sharpness-Aware Minimization.

One backbone, one binary head per finding (five tasks), the SAM optimizer
wrapper from the davda54/sam repository around SGD, and a training loop in the
style of the Chexpert baseline code: a per-task loss helper, running sums per
task, a cosine schedule, a validation pass with a simple AUC, and callbacks.
Synthetic images, CPU.
"""
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def make_cfg():
    return SimpleNamespace(
        num_classes=[1, 1, 1, 1, 1],
        pos_weight=[1.0, 2.0, 1.5, 1.0, 3.0],
        criterion="BCE",
        batch_weight=True,
        lr=0.05,
        momentum=0.9,
        rho=0.05,
        epochs=2,
        steps_per_epoch=3,
        batch_size=8,
        image_size=32,
        seed=7,
    )


class SAM(torch.optim.Optimizer):
    def __init__(self, params, base_optimizer, rho=0.05, adaptive=False, **kwargs):
        assert rho >= 0.0, f"Invalid rho, should be non-negative: {rho}"
        defaults = dict(rho=rho, adaptive=adaptive, **kwargs)
        super().__init__(params, defaults)
        self.base_optimizer = base_optimizer(self.param_groups, **kwargs)
        self.param_groups = self.base_optimizer.param_groups

    @torch.no_grad()
    def first_step(self, zero_grad=False):
        grad_norm = self._grad_norm()
        for group in self.param_groups:
            scale = group["rho"] / (grad_norm + 1e-12)
            for p in group["params"]:
                if p.grad is None:
                    continue
                self.state[p]["old_p"] = p.data.clone()
                e_w = (torch.pow(p, 2) if group["adaptive"] else 1.0) * p.grad * scale.to(p)
                p.add_(e_w)  # climb to the local maximum "w + e(w)"
        if zero_grad:
            self.zero_grad()

    @torch.no_grad()
    def second_step(self, zero_grad=False):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                p.data = self.state[p]["old_p"]  # get back to "w" from "w + e(w)"
        self.base_optimizer.step()  # do the actual "sharpness-aware" update
        if zero_grad:
            self.zero_grad()

    def _grad_norm(self):
        shared_device = self.param_groups[0]["params"][0].device
        norm = torch.norm(
            torch.stack([
                ((torch.abs(p) if group["adaptive"] else 1.0) * p.grad).norm(p=2).to(shared_device)
                for group in self.param_groups for p in group["params"]
                if p.grad is not None
            ]),
            p=2,
        )
        return norm


class Backbone(nn.Module):
    def __init__(self, width=16):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.BatchNorm2d(2 * width), nn.ReLU(),
        )
        self.num_features = 2 * width

    def forward(self, x):
        return self.features(x)


class Classifier(nn.Module):
    """Backbone + one 1x1-conv head per task; returns logits and logit maps."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.backbone = Backbone()
        for index, num_class in enumerate(cfg.num_classes):
            setattr(self, f"fc_{index}", nn.Conv2d(self.backbone.num_features, num_class, 1))

    def forward(self, x):
        feat_map = self.backbone(x)
        logits, logit_maps = [], []
        for index in range(len(self.cfg.num_classes)):
            classifier = getattr(self, f"fc_{index}")
            logit_map = classifier(feat_map)
            logit_maps.append(logit_map.squeeze())
            feat = F.adaptive_avg_pool2d(feat_map, 1)
            logit = classifier(feat).squeeze(-1).squeeze(-1)
            logits.append(logit)
        return logits, logit_maps


def get_loss(output, target, index, device, cfg):
    target = target[:, index].view(-1)
    pos_weight = torch.tensor(cfg.pos_weight[index], device=device)
    if cfg.batch_weight and target.sum() > 0:
        pos_weight = (target.size(0) - target.sum()) / target.sum()
    loss = F.binary_cross_entropy_with_logits(
        output[index].view(-1), target, pos_weight=pos_weight)
    label = torch.sigmoid(output[index].view(-1)).ge(0.5).float()
    acc = (target == label).float().sum() / len(label)
    return loss, acc


def synthetic_batch(cfg, generator):
    x = torch.randn(cfg.batch_size, 1, cfg.image_size, cfg.image_size, generator=generator)
    y = (torch.rand(cfg.batch_size, len(cfg.num_classes), generator=generator) > 0.6).float()
    return x, y


def simple_auc(scores, labels):
    pos, neg = scores[labels == 1], scores[labels == 0]
    if len(pos) == 0 or len(neg) == 0:
        return 0.5
    return float((pos[:, None] > neg[None, :]).float().mean())


class EpochSummary:
    def on_epoch_end(self, trainer, epoch, summary):
        loss_str = " ".join(f"{v:.3f}" for v in summary["loss"])
        print(f"epoch {epoch}: task losses [{loss_str}] auc={summary['auc']:.3f}")


class Trainer:
    def __init__(self, cfg, model, device="cpu", callbacks=()):
        self.cfg = cfg
        self.model = model
        self.device = device
        self.callbacks = list(callbacks)
        self.optimizer = SAM(model.parameters(), torch.optim.SGD, rho=cfg.rho,
                             lr=cfg.lr, momentum=cfg.momentum)
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
            self.optimizer.base_optimizer, T_max=cfg.epochs * cfg.steps_per_epoch)
        self.gen = torch.Generator().manual_seed(cfg.seed)
        self.num_tasks = len(cfg.num_classes)

    def train_step(self, image, target, loss_sum, acc_sum):
        cfg, device, num_tasks = self.cfg, self.device, self.num_tasks
        optimizer = self.optimizer
        # first forward-backward pass
        output, logit_map = self.model(image)
        loss = 0
        for t in range(num_tasks):
            loss_t, acc_t = get_loss(output, target, t, device, cfg)
            loss += loss_t
            loss_sum[t] += loss_t.item()
            acc_sum[t] += acc_t.item()
        optimizer.zero_grad()
        loss.backward()
        optimizer.first_step(zero_grad=True)

        # second forward-backward pass
        output, logit_map = self.model(image)
        for t in range(num_tasks):
            loss_t, acc_t = get_loss(output, target, t, device, cfg)
            loss += loss_t
        loss.backward()  # raises
        optimizer.second_step(zero_grad=True)
        self.scheduler.step()

    def train_epoch(self, epoch):
        self.model.train()
        loss_sum = np.zeros(self.num_tasks)
        acc_sum = np.zeros(self.num_tasks)
        for _ in range(self.cfg.steps_per_epoch):
            image, target = synthetic_batch(self.cfg, self.gen)
            self.train_step(image.to(self.device), target.to(self.device), loss_sum, acc_sum)
        return loss_sum / self.cfg.steps_per_epoch, acc_sum / self.cfg.steps_per_epoch

    @torch.no_grad()
    def evaluate(self):
        self.model.eval()
        image, target = synthetic_batch(self.cfg, self.gen)
        output, _ = self.model(image)
        aucs = [simple_auc(torch.sigmoid(output[t].view(-1)), target[:, t])
                for t in range(self.num_tasks)]
        return float(np.mean(aucs))

    def fit(self):
        for epoch in range(1, self.cfg.epochs + 1):
            loss, acc = self.train_epoch(epoch)
            summary = dict(loss=loss, acc=acc, auc=self.evaluate())
            for cb in self.callbacks:
                cb.on_epoch_end(self, epoch, summary)


def main():
    cfg = make_cfg()
    torch.manual_seed(cfg.seed)
    model = Classifier(cfg)
    Trainer(cfg, model, callbacks=[EpochSummary()]).fit()


if __name__ == "__main__":
    main()
