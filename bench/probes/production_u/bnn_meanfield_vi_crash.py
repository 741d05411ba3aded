# expect: freed_graph
# source: https://github.com/pyro-ppl/pyro/issues/2292
"""Mean-field variational Bayesian neural network (Bayes-by-backprop style).

Every BayesianLinear layer keeps a Gaussian variational posterior over its
weights; the scale is kept unconstrained and mapped to the positive reals with
the distributions' constraint registry, as in Pyro's AutoGuides. A small Trainer runs ELBO steps with Monte-Carlo samples, an LR
scheduler, a logging callback and an evaluation pass with posterior
predictive averaging. Data: seeded synthetic binary classification.
"""
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Normal, constraints, kl_divergence, transform_to


@dataclass
class VIConfig:
    in_features: int = 6
    hidden: int = 16
    n_train: int = 256
    n_test: int = 128
    batch_size: int = 64
    epochs: int = 3
    lr: float = 1e-2
    mc_samples: int = 2
    prior_scale: float = 1.0
    init_scale: float = 0.05
    eval_samples: int = 8
    milestones: list = field(default_factory=lambda: [2])
    seed: int = 0


class BayesianLinear(nn.Module):
    def __init__(self, in_features, out_features, prior_scale, init_scale):
        super().__init__()
        self.weight_loc = nn.Parameter(torch.randn(out_features, in_features) * 0.1)
        self.bias_loc = nn.Parameter(torch.zeros(out_features))
        self._positive = transform_to(constraints.positive).with_cache()
        init_unconstrained = self._positive.inv(torch.full((out_features, in_features), init_scale))
        self.weight_scale_unconstrained = nn.Parameter(init_unconstrained.clone())
        self.register_buffer("prior_scale", torch.tensor(prior_scale))

    @property
    def weight_scale(self):
        return self._positive(self.weight_scale_unconstrained)

    def posterior(self):
        return Normal(self.weight_loc, self.weight_scale)

    def prior(self):
        return Normal(torch.zeros_like(self.weight_loc), self.prior_scale.expand_as(self.weight_loc))

    def kl(self):
        return kl_divergence(self.posterior(), self.prior()).sum()

    def forward(self, x):
        weight = self.posterior().rsample()
        return F.linear(x, weight, self.bias_loc)


class BayesianMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.l1 = BayesianLinear(cfg.in_features, cfg.hidden, cfg.prior_scale, cfg.init_scale)
        self.l2 = BayesianLinear(cfg.hidden, 1, cfg.prior_scale, cfg.init_scale)

    def bayesian_layers(self):
        return [m for m in self.modules() if isinstance(m, BayesianLinear)]

    def kl(self):
        return sum(layer.kl() for layer in self.bayesian_layers())

    def forward(self, x):
        return self.l2(torch.tanh(self.l1(x))).squeeze(-1)


def negative_elbo(model, x, y, n_data, mc_samples):
    nll = 0.0
    for _ in range(mc_samples):
        logits = model(x)
        nll = nll + F.binary_cross_entropy_with_logits(logits, y, reduction="sum")
    nll = nll / mc_samples
    return nll * (n_data / x.size(0)) + model.kl(), nll


class LoggingCallback:
    def __init__(self):
        self.history = []

    def on_epoch_end(self, epoch, logs):
        self.history.append(logs)
        print("epoch %d  -elbo %.3f  nll %.3f  test_acc %.3f  lr %.4f" % (
            epoch, logs["loss"], logs["nll"], logs["test_acc"], logs["lr"]))


class VITrainer:
    def __init__(self, model, cfg, callbacks=()):
        self.model = model
        self.cfg = cfg
        self.callbacks = list(callbacks)
        self.optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
        self.scheduler = torch.optim.lr_scheduler.MultiStepLR(self.optimizer, milestones=cfg.milestones, gamma=0.5)

    def train_step(self, x, y, n_data):
        self.model.train()
        self.optimizer.zero_grad()
        loss, nll = negative_elbo(self.model, x, y, n_data, self.cfg.mc_samples)
        loss.backward()  # raises
        self.optimizer.step()
        return loss.item(), nll.item()

    @torch.no_grad()
    def evaluate(self, x, y):
        self.model.eval()
        probs = torch.stack([torch.sigmoid(self.model(x)) for _ in range(self.cfg.eval_samples)]).mean(0)
        return ((probs > 0.5).float() == y).float().mean().item()

    def fit(self, train, test):
        x_train, y_train = train
        n = x_train.size(0)
        for epoch in range(self.cfg.epochs):
            perm = torch.randperm(n)
            for i in range(0, n, self.cfg.batch_size):
                idx = perm[i:i + self.cfg.batch_size]
                loss, nll = self.train_step(x_train[idx], y_train[idx], n)
            self.scheduler.step()
            logs = {"loss": loss, "nll": nll, "test_acc": self.evaluate(*test),
                    "lr": self.optimizer.param_groups[0]["lr"]}
            for cb in self.callbacks:
                cb.on_epoch_end(epoch, logs)


def make_data(cfg):
    g = torch.Generator().manual_seed(cfg.seed)
    w_true = torch.randn(cfg.in_features, generator=g)
    x = torch.randn(cfg.n_train + cfg.n_test, cfg.in_features, generator=g)
    y = (x @ w_true + 0.3 * torch.randn(x.size(0), generator=g) > 0).float()
    return (x[:cfg.n_train], y[:cfg.n_train]), (x[cfg.n_train:], y[cfg.n_train:])


def main():
    cfg = VIConfig()
    torch.manual_seed(cfg.seed)
    train, test = make_data(cfg)
    model = BayesianMLP(cfg)
    trainer = VITrainer(model, cfg, callbacks=[LoggingCallback()])
    trainer.fit(train, test)


if __name__ == "__main__":
    main()
