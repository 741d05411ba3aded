# expect: clean
# source: https://github.com/mit-ll-responsible-ai/responsible-ai-toolbox/pull/27
"""Adversarially robust keyword spotting with a learnable filterbank front-end.

The perturbation tooling mirrors the rai-toolbox design: a `gradient_ascent` solver
that optimises a perturbation model with a projected optimizer while the model and
the data are frozen / put in eval mode by small stateful utilities.  The training
loop learns a filterbank front-end and a small conv classifier on synthetic
waveforms, and switches on adversarial training in feature space after a warm-up.
"""
import contextlib
import functools
import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import numpy as np
import torch as tr
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    n_classes: int = 6
    n_samples: int = 96
    wave_len: int = 400
    n_filters: int = 16
    win: int = 40
    hop: int = 20
    batch_size: int = 16
    epochs: int = 3
    lr: float = 3e-3
    frontend_lr: float = 1e-3
    adv_warmup_epochs: int = 1
    adv_steps: int = 3
    adv_epsilon: float = 0.5
    adv_lr: float = 0.2
    adv_weight: float = 0.5
    seed: int = 7


# ------------------------------------------------------------- stateful utilities
def flatten_params(item) -> Iterable[tr.Tensor]:
    if isinstance(item, tr.Tensor):
        yield item
        return
    for x in item:
        if isinstance(x, dict):
            yield from x["params"]
        else:
            yield from flatten_params(x)


def freeze(*items) -> Callable[[], None]:
    param_states: Dict[tr.Tensor, bool] = {}
    for item in items:
        if isinstance(item, nn.Module):
            item = item.parameters()
        elif isinstance(item, tr.optim.Optimizer):
            item = item.param_groups
        for param in flatten_params(item):
            if param not in param_states:
                param_states[param] = param.requires_grad
                param.requires_grad_(False)

    def restore_state():
        for p, requires_grad in param_states.items():
            p.requires_grad_(requires_grad)

    return restore_state


@contextlib.contextmanager
def frozen(*items):
    restore = freeze(*items)
    try:
        yield
    finally:
        restore()


@contextlib.contextmanager
def evaluating(*modules: nn.Module):
    states = [(m, m.training) for m in modules]
    for m, _ in states:
        m.eval()
    try:
        yield
    finally:
        for m, was_training in states:
            m.train(was_training)


def negate(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return -fn(*args, **kwargs)
    return wrapper


# ------------------------------------------------------------ perturbation models
class AdditivePerturbation(nn.Module):
    def __init__(self, data: tr.Tensor):
        super().__init__()
        self.delta = nn.Parameter(tr.zeros_like(data))

    def forward(self, data):
        return data + self.delta


class L2ProjectedOptim(tr.optim.SGD):
    """SGD on L2-normalised gradients followed by projection onto an L2 ball."""

    def __init__(self, params, epsilon: float, lr: float):
        super().__init__(params, lr=lr)
        self.epsilon = epsilon

    @tr.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                flat = p.grad.flatten(1)
                p.grad.copy_((flat / flat.norm(dim=1, keepdim=True).clamp_min(1e-12)).view_as(p))
        super().step(closure)
        for group in self.param_groups:
            for p in group["params"]:
                flat = p.flatten(1)
                scale = (self.epsilon / flat.norm(dim=1, keepdim=True).clamp_min(1e-12)).clamp(max=1.0)
                p.copy_((flat * scale).view_as(p))


def gradient_ascent(*, model, data, target, optimizer, steps: int, criterion=None,
                    reduction_fn=tr.sum, **optim_kwargs) -> Tuple[tr.Tensor, tr.Tensor]:
    data = tr.as_tensor(data)
    target = tr.as_tensor(target)

    if not data.is_leaf:
        data = data.detach()

    if not target.is_leaf:
        target = target.detach()

    if criterion is None:
        criterion = nn.CrossEntropyLoss(reduction="none")
    criterion = negate(criterion)

    pmodel = AdditivePerturbation(data)
    optim = optimizer(pmodel.parameters(), **optim_kwargs)

    to_freeze: List[Any] = [data, target]
    if isinstance(model, nn.Module):
        to_freeze.append(model)
    packed_model = (model,) if isinstance(model, nn.Module) else ()

    with frozen(*to_freeze), evaluating(*packed_model), tr.enable_grad():
        for _ in range(steps):
            xadv = pmodel(data)
            losses = criterion(model(xadv), target)
            loss = reduction_fn(losses)
            optim.zero_grad(set_to_none=True)
            loss.backward()
            optim.step()

    with tr.no_grad():
        xadv = pmodel(data)
        losses = -criterion(model(xadv), target)
    return xadv.detach(), losses.detach()


# --------------------------------------------------------------------------- models
class LearnableFilterbank(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.win, self.hop = cfg.win, cfg.hop
        t = tr.arange(cfg.win, dtype=tr.float32)
        freqs = tr.linspace(0.02, 0.45, cfg.n_filters)
        kernels = tr.cos(2 * math.pi * freqs[:, None] * t[None, :]) * tr.hann_window(cfg.win)[None, :]
        self.kernels = nn.Parameter(kernels.unsqueeze(1))
        self.log_gain = nn.Parameter(tr.zeros(cfg.n_filters))

    def forward(self, wave):
        out = F.conv1d(wave.unsqueeze(1), self.kernels, stride=self.hop)
        energy = out.pow(2) * self.log_gain.exp()[None, :, None]
        return tr.log1p(energy)


class KWSClassifier(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.conv1 = nn.Conv1d(cfg.n_filters, 32, 3, padding=1)
        self.bn1 = nn.BatchNorm1d(32)
        self.conv2 = nn.Conv1d(32, 32, 3, padding=1)
        self.head = nn.Linear(32, cfg.n_classes)

    def forward(self, feats):
        h = F.relu(self.bn1(self.conv1(feats)))
        h = F.relu(self.conv2(h))
        return self.head(h.mean(-1))


def make_dataset(cfg: Config):
    rng = np.random.default_rng(cfg.seed)
    labels = rng.integers(0, cfg.n_classes, size=cfg.n_samples)
    t = np.arange(cfg.wave_len) / cfg.wave_len
    waves = np.stack([np.sin(2 * np.pi * (20 + 15 * y) * t) + 0.3 * rng.standard_normal(cfg.wave_len)
                      for y in labels]).astype(np.float32)
    return tr.from_numpy(waves), tr.from_numpy(labels).long()


# -------------------------------------------------------------------------- trainer
class Trainer:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.frontend = LearnableFilterbank(cfg)
        self.classifier = KWSClassifier(cfg)
        self.opt = tr.optim.Adam([
            {"params": self.classifier.parameters(), "lr": cfg.lr},
            {"params": self.frontend.parameters(), "lr": cfg.frontend_lr},
        ])
        self.sched = tr.optim.lr_scheduler.CosineAnnealingLR(self.opt, T_max=cfg.epochs)
        self.callbacks: List[Callable[[int, Dict[str, float]], None]] = []
        self.epoch = 0

    @property
    def adversarial(self) -> bool:
        return self.epoch >= self.cfg.adv_warmup_epochs

    def perturb(self, feats, labels):
        feats_adv, _ = gradient_ascent(
            model=self.classifier, data=feats, target=labels,
            optimizer=functools.partial(L2ProjectedOptim, epsilon=self.cfg.adv_epsilon),
            lr=self.cfg.adv_lr, steps=self.cfg.adv_steps)
        return feats_adv

    def train_step(self, wave, labels) -> Dict[str, float]:
        self.frontend.train()
        self.classifier.train()
        feats = self.frontend(wave)
        loss = F.cross_entropy(self.classifier(feats), labels)
        stats = {"clean": loss.item()}
        if self.adversarial:
            feats_adv = self.perturb(feats, labels)
            adv_loss = F.cross_entropy(self.classifier(feats_adv), labels)
            loss = (1 - self.cfg.adv_weight) * loss + self.cfg.adv_weight * adv_loss
            stats["adv"] = adv_loss.item()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return stats

    @tr.no_grad()
    def evaluate(self, waves, labels) -> float:
        self.frontend.eval()
        self.classifier.eval()
        logits = self.classifier(self.frontend(waves))
        return (logits.argmax(-1) == labels).float().mean().item()

    def fit(self, waves, labels):
        n = waves.shape[0]
        g = tr.Generator().manual_seed(self.cfg.seed)
        for self.epoch in range(self.cfg.epochs):
            perm = tr.randperm(n, generator=g)
            agg: Dict[str, List[float]] = {}
            for i in range(0, n, self.cfg.batch_size):
                idx = perm[i:i + self.cfg.batch_size]
                for k, v in self.train_step(waves[idx], labels[idx]).items():
                    agg.setdefault(k, []).append(v)
            self.sched.step()
            logs = {k: float(np.mean(v)) for k, v in agg.items()}
            logs["acc"] = self.evaluate(waves, labels)
            for cb in self.callbacks:
                cb(self.epoch, logs)


def main():
    cfg = Config()
    tr.manual_seed(cfg.seed)
    waves, labels = make_dataset(cfg)
    trainer = Trainer(cfg)
    trainer.callbacks.append(lambda ep, logs: print(f"epoch {ep}: " + ", ".join(f"{k}={v:.3f}" for k, v in logs.items())))
    trainer.fit(waves, labels)


if __name__ == "__main__":
    main()
