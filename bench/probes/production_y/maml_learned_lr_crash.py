# expect: freed_graph
# source: https://github.com/learnables/learn2learn/issues/381
"""Few-shot classification with MAML whose outer-loop parameters are updated by a
learnable (hypergradient) optimizer, in the style of learn2learn's
MAML + LearnableOptimizer + HypergradTransform. Tasks are synthetic Gaussian
clusters; each meta-iteration adapts a clone of the model on every task.
"""
import copy
import random
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class MetaConfig:
    ways: int = 3
    shots: int = 4
    dim: int = 8
    hidden: int = 32
    fast_lr: float = 0.3
    meta_lr: float = 0.01
    hyper_lr: float = 0.05
    meta_batch_size: int = 4
    adaptation_steps: int = 1
    num_iterations: int = 4
    first_order: bool = False
    seed: int = 7


# ----------------------------------------------------------------- module utils
def clone_module(module):
    clone = copy.copy(module)
    clone._parameters = dict(module._parameters)
    clone._modules = dict(module._modules)
    for name, param in module._parameters.items():
        if param is not None:
            clone._parameters[name] = param.clone()
    for name, child in module._modules.items():
        clone._modules[name] = clone_module(child)
    return clone


def update_module(module):
    for name, param in module._parameters.items():
        if param is not None and getattr(param, "update", None) is not None:
            module._parameters[name] = param + param.update
    for child in module._modules.values():
        update_module(child)
    return module


def maml_update(model, lr, grads):
    for p, g in zip(model.parameters(), grads):
        p.update = -lr * g
    return update_module(model)


class MAML(nn.Module):
    def __init__(self, model, lr, first_order=False):
        super().__init__()
        self.module = model
        self.lr = lr
        self.first_order = first_order

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def clone(self):
        return MAML(clone_module(self.module), self.lr, self.first_order)

    def adapt(self, loss):
        second_order = not self.first_order
        grads = torch.autograd.grad(loss, list(self.module.parameters()),
                                    retain_graph=second_order, create_graph=second_order)
        self.module = maml_update(self.module, self.lr, grads)


# ------------------------------------------------------------ learned optimizer
class HypergradTransform(nn.Module):
    def __init__(self, param, lr=0.01):
        super().__init__()
        self.lr = nn.Parameter(lr * torch.ones_like(param))

    def forward(self, grad):
        return self.lr * grad


class LearnableOptimizer(nn.Module):
    def __init__(self, model, transform, lr=1.0):
        super().__init__()
        self.info = {"model": model}
        self.transforms = nn.ModuleList([transform(p) for p in model.parameters()])
        self.lr = lr

    def step(self):
        model = self.info["model"]
        for param, transform in zip(model.parameters(), self.transforms):
            if param.grad is not None:
                grad = param.grad.detach()
                update = -self.lr * transform(grad)
                param.detach_()
                param.requires_grad = False
                param.update = update
        update_module(model)
        for param in model.parameters():
            param.retain_grad()

    def zero_grad(self):
        for p in self.info["model"].parameters():
            if p.grad is not None:
                p.grad = torch.zeros_like(p.data)


# ------------------------------------------------------------------------ data
class ClusterTaskSampler:
    def __init__(self, cfg, gen):
        self.cfg, self.gen = cfg, gen

    def sample(self):
        c = self.cfg
        centers = torch.randn(c.ways, c.dim, generator=self.gen) * 2.0
        x = centers.repeat_interleave(2 * c.shots, 0)
        x = x + 0.5 * torch.randn(x.shape, generator=self.gen)
        y = torch.arange(c.ways).repeat_interleave(2 * c.shots)
        idx = torch.arange(len(y))
        support = idx % (2 * c.shots) < c.shots
        return (x[support], y[support]), (x[~support], y[~support])


def accuracy(logits, y):
    return (logits.argmax(1) == y).float().mean().item()


def fast_adapt(task, learner, loss_fn, steps):
    (xs, ys), (xq, yq) = task
    for _ in range(steps):
        learner.adapt(loss_fn(learner(xs), ys))
    logits = learner(xq)
    return loss_fn(logits, yq), accuracy(logits, yq)


class MetaTrainer:
    def __init__(self, cfg):
        self.cfg = cfg
        net = nn.Sequential(nn.Linear(cfg.dim, cfg.hidden), nn.ReLU(),
                            nn.Linear(cfg.hidden, cfg.ways))
        self.maml = MAML(net, lr=cfg.fast_lr, first_order=cfg.first_order)
        self.metaopt = LearnableOptimizer(
            self.maml, lambda p: HypergradTransform(p, lr=cfg.meta_lr), lr=1.0)
        self.opt = torch.optim.SGD(self.metaopt.parameters(), lr=cfg.hyper_lr)
        self.loss_fn = nn.CrossEntropyLoss()
        self.sampler = ClusterTaskSampler(cfg, torch.Generator().manual_seed(cfg.seed))
        self.history = []

    def train_step(self):
        cfg = self.cfg
        self.opt.zero_grad()
        self.metaopt.zero_grad()
        meta_err, meta_acc = 0.0, 0.0
        for _ in range(cfg.meta_batch_size):
            learner = self.maml.clone()
            err, acc = fast_adapt(self.sampler.sample(), learner, self.loss_fn,
                                  cfg.adaptation_steps)
            err.backward()  # raises
            meta_err += err.item()
            meta_acc += acc
        for p in self.maml.parameters():
            if p.grad is not None:
                p.grad.mul_(1.0 / cfg.meta_batch_size)
        self.opt.step()
        self.metaopt.step()
        self.history.append((meta_err / cfg.meta_batch_size, meta_acc / cfg.meta_batch_size))
        return self.history[-1]

    def evaluate(self, n_tasks=4):
        accs = []
        for _ in range(n_tasks):
            learner = self.maml.clone()
            _, acc = fast_adapt(self.sampler.sample(), learner, self.loss_fn,
                                self.cfg.adaptation_steps)
            accs.append(acc)
        return float(np.mean(accs))


def main():
    cfg = MetaConfig()
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    trainer = MetaTrainer(cfg)
    for it in range(cfg.num_iterations):
        err, acc = trainer.train_step()
        print(f"iter {it}: meta-train error {err:.3f} acc {acc:.3f}")
    print("meta-test acc:", round(trainer.evaluate(), 3))


if __name__ == "__main__":
    main()
