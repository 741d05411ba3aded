# expect: clean
# source: https://github.com/learnables/learn2learn/issues/314
"""Meta-training a few-shot classifier with a learn2learn-style MAML wrapper.

`MAML.clone()` returns a differentiable copy of the learner, `adapt()`
takes inner-loop gradient steps on the support set, and the outer loop
accumulates the query losses of a meta-batch of synthetic 5-way tasks.
"""
import copy
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import grad


@dataclass
class Args:
    n_ways: int = 5
    k_shots: int = 2
    k_eval: int = 3
    in_dim: int = 16
    meta_batch_size: int = 4
    inner_steps: int = 1
    inner_lr: float = 0.1
    outer_lr: float = 1e-3
    num_its: int = 3
    first_order: bool = False
    allow_unused: bool = True
    seed: int = 0


def update_module(module, updates):
    for (name, p), g in zip(list(module.named_parameters()), updates):
        if g is None:
            continue
        owner = module
        *path, leaf = name.split(".")
        for part in path:
            owner = getattr(owner, part)
        owner._parameters[leaf] = p - g
    return module


def clone_module(module):
    clone = copy.deepcopy(module)
    for (name, p_clone), p in zip(clone.named_parameters(), module.parameters()):
        owner = clone
        *path, leaf = name.split(".")
        for part in path:
            owner = getattr(owner, part)
        owner._parameters[leaf] = p.clone()
    return clone


class MAML(nn.Module):
    def __init__(self, model, lr, first_order=False, allow_unused=False):
        super().__init__()
        self.module, self.lr = model, lr
        self.first_order, self.allow_unused = first_order, allow_unused

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def clone(self):
        return MAML(clone_module(self.module), self.lr, self.first_order, self.allow_unused)

    def adapt(self, loss):
        params = list(self.module.parameters())
        kwargs = dict(retain_graph=not self.first_order, create_graph=not self.first_order)
        gradients = grad(loss, params, allow_unused=self.allow_unused, **kwargs)
        updates = [None if g is None else self.lr * g for g in gradients]
        update_module(self.module, updates)


class FewShotLearner(nn.Module):
    def __init__(self, in_dim, n_ways, hidden=32, proj_dim=8):
        super().__init__()
        self.features = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.cls = nn.Linear(hidden, n_ways)
        self.proj = nn.Linear(hidden, proj_dim)

    def forward(self, x):
        return self.cls(self.features(x))

    def embed(self, x):
        return F.normalize(self.proj(self.features(x)), dim=-1)


class TaskSampler:
    def __init__(self, args):
        self.args = args
        g = torch.Generator().manual_seed(args.seed)
        self.prototypes = torch.randn(20, args.in_dim, generator=g)
        self.gen = g

    def sample(self):
        a = self.args
        classes = random.sample(range(20), a.n_ways)
        n = a.k_shots + a.k_eval
        xs, ys = [], []
        for label, c in enumerate(classes):
            xs.append(self.prototypes[c] + 0.3 * torch.randn(n, a.in_dim, generator=self.gen))
            ys.append(torch.full((n,), label))
        x, y = torch.stack(xs), torch.stack(ys)
        return (x[:, :a.k_shots].reshape(-1, a.in_dim), y[:, :a.k_shots].reshape(-1),
                x[:, a.k_shots:].reshape(-1, a.in_dim), y[:, a.k_shots:].reshape(-1))


def accuracy(logits, y):
    return (logits.argmax(-1) == y).float().mean()


def fast_adapt(task, learner, args):
    sx, sy, qx, qy = task
    for _ in range(args.inner_steps):
        learner.adapt(F.cross_entropy(learner(sx), sy))
    logits = learner(qx)
    return F.cross_entropy(logits, qy), accuracy(logits, qy)


def meta_train_iterations(args, maml, opt, sampler):
    for it in range(args.num_its):
        opt.zero_grad()
        meta_loss, meta_acc = 0.0, 0.0
        for _ in range(args.meta_batch_size):
            learner = maml.clone()
            loss, acc = fast_adapt(sampler.sample(), learner, args)
            (loss / args.meta_batch_size).backward()
            meta_loss += loss.item() / args.meta_batch_size
            meta_acc += acc.item() / args.meta_batch_size
        opt.step()
        print(f"it {it}: meta-loss {meta_loss:.3f} meta-acc {meta_acc:.3f}")


def main():
    args = Args()
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    model = FewShotLearner(args.in_dim, args.n_ways)
    maml = MAML(model, lr=args.inner_lr, first_order=args.first_order, allow_unused=args.allow_unused)
    opt = torch.optim.Adam(maml.parameters(), lr=args.outer_lr)
    meta_train_iterations(args, maml, opt, TaskSampler(args))


if __name__ == "__main__":
    main()
