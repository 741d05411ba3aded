# expect: nonleaf_optimizer
# source: https://github.com/facebookresearch/higher/issues/76
"""MAML with MetaNet-style generated fast weights for few-shot classification.

A weight generator reads the support set and emits task-specific classifier
weights; the base model is parameterized with them and then fine-tuned in a
differentiable inner loop. The outer loop meta-learns both the base model and
the weight generator from the query loss.
"""
import contextlib
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call

torch.manual_seed(0)
np.random.seed(0)


@dataclass
class MetaConfig:
    n_way: int = 5
    k_shot: int = 3
    k_query: int = 6
    in_dim: int = 20
    feat_dim: int = 32
    inner_lr: float = 0.4
    meta_lr: float = 0.05
    n_inner_iter: int = 3
    meta_batch: int = 4
    n_meta_steps: int = 12
    eval_every: int = 6


class TaskSampler:
    """Few-shot tasks drawn from a bank of Gaussian 'classes'."""

    def __init__(self, cfg, n_classes=40, seed=0):
        self.cfg = cfg
        rng = np.random.RandomState(seed)
        self.centers = rng.randn(n_classes, cfg.in_dim).astype(np.float32) * 1.5
        self.rng = rng

    def sample(self):
        cfg = self.cfg
        cls = self.rng.choice(len(self.centers), cfg.n_way, replace=False)
        def draw(n):
            xs, ys = [], []
            for label, c in enumerate(cls):
                xs.append(self.centers[c] + self.rng.randn(n, cfg.in_dim).astype(np.float32))
                ys.append(np.full(n, label))
            return torch.from_numpy(np.concatenate(xs)), torch.from_numpy(np.concatenate(ys)).long()
        x_train, y_train = draw(cfg.k_shot)
        x_test, y_test = draw(cfg.k_query)
        return x_train, y_train, x_test, y_test


class Model(nn.Module):
    """Feature extractor with a classifier head that is set from outside."""

    def __init__(self, cfg):
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(cfg.in_dim, 64), nn.ReLU(),
            nn.Linear(64, cfg.feat_dim), nn.ReLU())
        self.head_bias = nn.Parameter(torch.zeros(cfg.n_way))
        self.fast_weight = None

    def parameterize(self, weight):
        self.fast_weight = weight

    def features(self, x):
        return self.body(x)

    def forward(self, x, y=None):
        logits = F.linear(self.features(x), self.fast_weight, self.head_bias)
        if y is None:
            return logits
        return F.cross_entropy(logits, y)


class WeightGenerator(nn.Module):
    """Maps class-mean support features to classifier rows (one per class)."""

    def __init__(self, cfg, encoder):
        super().__init__()
        self.cfg = cfg
        self.encoder = encoder
        self.proj = nn.Sequential(nn.Linear(cfg.feat_dim, cfg.feat_dim), nn.Tanh(),
                                  nn.Linear(cfg.feat_dim, cfg.feat_dim))
        self.scale = nn.Parameter(torch.tensor(1.0))

    def forward(self, x_train, y_train=None):
        feats = self.encoder(x_train)
        if y_train is None:
            y_train = torch.arange(self.cfg.n_way).repeat_interleave(self.cfg.k_shot)
        protos = torch.stack([feats[y_train == c].mean(0) for c in range(self.cfg.n_way)])
        return self.scale * (protos + self.proj(protos))


class _FunctionalModel:
    """Stateless view of a module over an explicit list of fast parameters."""

    def __init__(self, module, names):
        self.module = module
        self.names = names
        self.fast_params = [p for _, p in module.named_parameters()]

    def __call__(self, *args, **kwargs):
        return functional_call(self.module, dict(zip(self.names, self.fast_params)), args, kwargs)


class _DifferentiableSGD:
    def __init__(self, fmodel, opt):
        self.fmodel = fmodel
        self.lrs = [group["lr"] for group in opt.param_groups for _ in group["params"]]

    def step(self, loss):
        grads = torch.autograd.grad(loss, self.fmodel.fast_params, create_graph=True)
        self.fmodel.fast_params = [p - lr * g for p, g, lr in zip(self.fmodel.fast_params, grads, self.lrs)]


@contextlib.contextmanager
def innerloop_ctx(model, opt):
    names = [n for n, _ in model.named_parameters()]
    fmodel = _FunctionalModel(model, names)
    yield fmodel, _DifferentiableSGD(fmodel, opt)


class MetaLearner:
    def __init__(self, cfg):
        self.cfg = cfg
        self.base_model = Model(cfg)
        self.weight_gen_model = WeightGenerator(cfg, encoder=nn.Sequential(
            nn.Linear(cfg.in_dim, 64), nn.ReLU(), nn.Linear(64, cfg.feat_dim)))
        self.meta_opt = torch.optim.SGD([
            {'params': self.base_model.parameters()},
            {'params': self.weight_gen_model.parameters()}
        ], lr=cfg.meta_lr, momentum=0.9)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.meta_opt, step_size=8, gamma=0.5)
        self.history = []

    def adapt_and_eval(self, x_train, y_train, x_test, y_test):
        cfg = self.cfg
        generated_weights = self.weight_gen_model(x_train, y_train)  # generate meta-network style fast weights
        self.base_model.parameterize(generated_weights)

        inner_opt = torch.optim.SGD([  # raises
            {'params': self.base_model.parameters()},
            {'params': [generated_weights]}
        ], lr=cfg.inner_lr)

        with innerloop_ctx(self.base_model, inner_opt) as (fmodel, diffopt):
            for _ in range(cfg.n_inner_iter):
                train_loss = fmodel(x_train, y_train)
                diffopt.step(train_loss)
            test_logits = fmodel(x_test)
        test_loss = F.cross_entropy(test_logits, y_test)
        acc = (test_logits.argmax(-1) == y_test).float().mean().item()
        return test_loss, acc

    def train_step(self, sampler):
        self.base_model.train()
        self.meta_opt.zero_grad()
        losses, accs = [], []
        for _ in range(self.cfg.meta_batch):
            test_loss, acc = self.adapt_and_eval(*sampler.sample())
            (test_loss / self.cfg.meta_batch).backward()
            losses.append(test_loss.item())
            accs.append(acc)
        self.meta_opt.step()
        self.scheduler.step()
        self.history.append((np.mean(losses), np.mean(accs)))
        return self.history[-1]

    def evaluate(self, sampler, n_tasks=8):
        self.base_model.eval()
        accs = []
        for _ in range(n_tasks):
            _, acc = self.adapt_and_eval(*sampler.sample())
            accs.append(acc)
        return float(np.mean(accs))


def main():
    cfg = MetaConfig()
    train_sampler = TaskSampler(cfg, seed=0)
    val_sampler = TaskSampler(cfg, seed=1)
    learner = MetaLearner(cfg)
    for step in range(1, cfg.n_meta_steps + 1):
        loss, acc = learner.train_step(train_sampler)
        print(f"meta-step {step:3d} query loss {loss:.3f} acc {acc:.3f}")
        if step % cfg.eval_every == 0:
            print(f"  val acc {learner.evaluate(val_sampler):.3f}")


main()
