# expect: freed_graph
# source: https://github.com/davda54/sam/issues/45
"""CIFAR-style classifier trained with Sharpness-Aware Minimization, with
stochastic weight averaging over the last epochs.

SAM needs two forward-backward passes per batch: the first one at the current
weights (to find the adversarial perturbation e(w)), the second one at w + e(w).
"""
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm
from torch.optim.swa_utils import SWALR, AveragedModel, update_bn


class SAM(torch.optim.Optimizer):
    def __init__(self, params, base_optimizer, rho=0.05, adaptive=False, **kwargs):
        assert rho >= 0.0, f"Invalid rho, should be non-negative: {rho}"
        defaults = dict(rho=rho, adaptive=adaptive, **kwargs)
        super().__init__(params, defaults)
        self.base_optimizer = base_optimizer(self.param_groups, **kwargs)
        self.param_groups = self.base_optimizer.param_groups
        self.defaults.update(self.base_optimizer.defaults)

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
        return torch.norm(torch.stack([
            ((torch.abs(p) if group["adaptive"] else 1.0) * p.grad).norm(p=2).to(shared_device)
            for group in self.param_groups for p in group["params"] if p.grad is not None
        ]), p=2)


def disable_running_stats(model):
    def _disable(module):
        if isinstance(module, _BatchNorm):
            module.backup_momentum = module.momentum
            module.momentum = 0
    model.apply(_disable)


def enable_running_stats(model):
    def _enable(module):
        if isinstance(module, _BatchNorm) and hasattr(module, "backup_momentum"):
            module.momentum = module.backup_momentum
    model.apply(_enable)


class SmallResNet(nn.Module):
    def __init__(self, width=8, n_classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.block = nn.Sequential(nn.Conv2d(width, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                   nn.Conv2d(width, width, 3, padding=1, bias=False), nn.BatchNorm2d(width))
        self.fc = nn.Linear(width, n_classes)

    def forward(self, x):
        x = self.stem(x)
        x = F.relu(x + self.block(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def smooth_crossentropy(pred, gold, smoothing=0.1):
    n_class = pred.size(1)
    one_hot = torch.full_like(pred, fill_value=smoothing / (n_class - 1))
    one_hot.scatter_(dim=1, index=gold.unsqueeze(1), value=1.0 - smoothing)
    return F.kl_div(F.log_softmax(pred, dim=1), target=one_hot, reduction="none").sum(-1)


class Trainer:
    def __init__(self, cfg):
        self.cfg = cfg
        self.model = SmallResNet(cfg.width)
        self.optimizer = SAM(self.model.parameters(), torch.optim.SGD, rho=cfg.rho, adaptive=cfg.adaptive,
                             lr=cfg.lr, momentum=0.9, weight_decay=cfg.weight_decay)
        self.swa_model = AveragedModel(self.model)
        self.swa_scheduler = SWALR(self.optimizer.base_optimizer, swa_lr=cfg.swa_lr)
        self._logits = {}

    def logits(self, inputs):
        # logits are reused by the accuracy meter, so keep them per batch
        key = id(inputs)
        if key not in self._logits:
            self._logits = {key: self.model(inputs)}
        return self._logits[key]

    def train_step(self, inputs, targets):
        # first forward-backward step
        enable_running_stats(self.model)
        predictions = self.logits(inputs)
        loss = smooth_crossentropy(predictions, targets, smoothing=self.cfg.label_smoothing)
        loss.mean().backward()
        self.optimizer.first_step(zero_grad=True)

        # second forward-backward step
        disable_running_stats(self.model)
        smooth_crossentropy(self.logits(inputs), targets, smoothing=self.cfg.label_smoothing).mean().backward()  # raises
        self.optimizer.second_step(zero_grad=True)

        with torch.no_grad():
            correct = torch.argmax(self.logits(inputs), 1) == targets
        return loss.mean().item(), correct.float().mean().item()

    def fit(self, loader):
        for epoch in range(self.cfg.epochs):
            self.model.train()
            stats = [self.train_step(x, y) for x, y in loader]
            if epoch >= self.cfg.swa_start:
                self.swa_model.update_parameters(self.model)
                self.swa_scheduler.step()
            loss = sum(s[0] for s in stats) / len(stats)
            acc = sum(s[1] for s in stats) / len(stats)
            print(f"epoch {epoch}: loss {loss:.4f} acc {acc:.3f}")
        update_bn(loader, self.swa_model)
        return self.swa_model


def make_loader(n_batches=2, batch_size=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch_size, 3, 8, 8, generator=g), torch.randint(0, 10, (batch_size,), generator=g))
            for _ in range(n_batches)]


def main():
    cfg = SimpleNamespace(width=8, rho=0.05, adaptive=False, lr=0.1, weight_decay=5e-4, label_smoothing=0.1,
                          epochs=2, swa_start=1, swa_lr=0.05)
    torch.manual_seed(42)
    trainer = Trainer(cfg)
    trainer.fit(make_loader())


if __name__ == "__main__":
    main()
