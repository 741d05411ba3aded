# expect: freed_graph
# source: https://github.com/pytorch/pytorch/issues/71062
"""Glow-style normalizing flow for tabular density estimation.

Each flow step is ActNorm -> invertible linear map -> affine coupling.  The
invertible linear map (the "1x1 convolution" of Glow on flat features) is kept
orthogonal with torch.nn.utils.parametrizations.orthogonal, so its
log-determinant is zero and its inverse is its transpose.  Parametrized
weights are cached with torch.nn.utils.parametrize.cached() so that each
orthogonal matrix is materialised once instead of once per use.

Trained by maximum likelihood on a synthetic mixture of Gaussians; evaluated
by validation NLL and by sampling through the inverse pass.
"""
import contextlib
import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import parametrizations, parametrize


@dataclass
class FlowConfig:
    dim: int = 6
    n_steps: int = 4
    hidden: int = 64
    lr: float = 1e-3
    actnorm_lr: float = 5e-3
    weight_decay: float = 1e-5
    batch_size: int = 128
    epochs: int = 3
    n_train: int = 1024
    n_val: int = 256
    cache_parametrizations: bool = True
    grad_clip: float = 5.0
    seed: int = 0
    log_every: int = 4
    patience: int = 3
    milestones: list = field(default_factory=lambda: [2])


class ActNorm(nn.Module):
    """Per-feature affine layer with data-dependent initialisation."""

    def __init__(self, dim):
        super().__init__()
        self.loc = nn.Parameter(torch.zeros(dim))
        self.log_scale = nn.Parameter(torch.zeros(dim))
        self.register_buffer("initialized", torch.tensor(0, dtype=torch.uint8))

    @torch.no_grad()
    def _initialize(self, x):
        self.loc.copy_(-x.mean(0))
        self.log_scale.copy_(-torch.log(x.std(0) + 1e-6))
        self.initialized.fill_(1)

    def forward(self, x):
        if not self.initialized:
            self._initialize(x)
        y = (x + self.loc) * torch.exp(self.log_scale)
        return y, self.log_scale.sum().expand(x.shape[0])

    def inverse(self, y):
        return y * torch.exp(-self.log_scale) - self.loc


class InvertibleLinear(nn.Module):
    """Orthogonal mixing of features (Glow's invertible 1x1 conv on vectors)."""

    def __init__(self, dim):
        super().__init__()
        self.linear = nn.Linear(dim, dim, bias=False)
        parametrizations.orthogonal(self.linear, "weight")

    @property
    def weight(self):
        return self.linear.weight

    def forward(self, x):
        # |det W| == 1 for an orthogonal matrix
        return self.linear(x), x.new_zeros(x.shape[0])

    def inverse(self, y):
        return y @ self.weight


class AffineCoupling(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.d = dim // 2
        self.net = nn.Sequential(
            nn.Linear(self.d, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, 2 * (dim - self.d)),
        )
        nn.init.zeros_(self.net[-1].weight)
        nn.init.zeros_(self.net[-1].bias)

    def _params(self, xa):
        shift, raw = self.net(xa).chunk(2, dim=1)
        return shift, torch.tanh(raw)

    def forward(self, x):
        xa, xb = x[:, :self.d], x[:, self.d:]
        shift, log_s = self._params(xa)
        yb = xb * torch.exp(log_s) + shift
        return torch.cat([xa, yb], 1), log_s.sum(1)

    def inverse(self, y):
        ya, yb = y[:, :self.d], y[:, self.d:]
        shift, log_s = self._params(ya)
        return torch.cat([ya, (yb - shift) * torch.exp(-log_s)], 1)


class Glow(nn.Module):
    def __init__(self, cfg: FlowConfig):
        super().__init__()
        self.dim = cfg.dim
        layers = []
        for _ in range(cfg.n_steps):
            layers += [ActNorm(cfg.dim), InvertibleLinear(cfg.dim), AffineCoupling(cfg.dim, cfg.hidden)]
        self.layers = nn.ModuleList(layers)

    def forward(self, x):
        logdet = x.new_zeros(x.shape[0])
        for layer in self.layers:
            x, ld = layer(x)
            logdet = logdet + ld
        return x, logdet

    def log_prob(self, x):
        z, logdet = self(x)
        log_pz = -0.5 * (z ** 2).sum(1) - 0.5 * self.dim * math.log(2 * math.pi)
        return log_pz + logdet

    @torch.no_grad()
    def sample(self, n):
        z = torch.randn(n, self.dim)
        for layer in reversed(self.layers):
            z = layer.inverse(z)
        return z


def make_mixture(n, dim, gen):
    centers = torch.tensor([[2.0] * dim, [-2.0] * dim, [2.0, -2.0] * (dim // 2)])
    idx = torch.randint(0, len(centers), (n,), generator=gen)
    return centers[idx] + 0.5 * torch.randn(n, dim, generator=gen)


class LoggingCallback:
    def __init__(self, every):
        self.every = every

    def on_step_end(self, trainer, step, loss):
        if step % self.every == 0:
            print(f"step {step:4d}  nll {loss:.4f}")

    def on_epoch_end(self, trainer, epoch, metrics):
        print(f"epoch {epoch}  val_nll {metrics['val_nll']:.4f}")


class EarlyStopping:
    def __init__(self, patience):
        self.patience, self.best, self.bad = patience, float("inf"), 0

    def on_step_end(self, trainer, step, loss):
        pass

    def on_epoch_end(self, trainer, epoch, metrics):
        if metrics["val_nll"] < self.best - 1e-4:
            self.best, self.bad = metrics["val_nll"], 0
        else:
            self.bad += 1
            trainer.should_stop = self.bad >= self.patience


class FlowTrainer:
    def __init__(self, model, cfg, callbacks=()):
        self.model, self.cfg = model, cfg
        actnorm = [p for n, p in model.named_parameters() if "loc" in n or "log_scale" in n]
        other = [p for n, p in model.named_parameters() if not ("loc" in n or "log_scale" in n)]
        self.opt = torch.optim.Adam(other, lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.opt_actnorm = torch.optim.SGD(actnorm, lr=cfg.actnorm_lr, momentum=0.9)
        self.sched = torch.optim.lr_scheduler.MultiStepLR(self.opt, milestones=cfg.milestones, gamma=0.5)
        self.callbacks = list(callbacks)
        self.global_step = 0
        self.should_stop = False

    def weight_cache(self):
        if self.cfg.cache_parametrizations:
            return parametrize.cached()
        return contextlib.nullcontext()

    def train_step(self, batch):
        self.model.train()
        loss = -self.model.log_prob(batch).mean()
        self.opt.zero_grad()
        self.opt_actnorm.zero_grad()
        loss.backward()  # raises
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
        self.opt.step()
        self.opt_actnorm.step()
        self.global_step += 1
        return loss.item()

    @torch.no_grad()
    def evaluate(self, data):
        self.model.eval()
        with self.weight_cache():
            nll = -self.model.log_prob(data).mean().item()
        return {"val_nll": nll}

    def fit(self, train_data, val_data):
        gen = torch.Generator().manual_seed(self.cfg.seed + 1)
        for epoch in range(self.cfg.epochs):
            perm = torch.randperm(train_data.shape[0], generator=gen)
            with self.weight_cache():
                for batch in train_data[perm].split(self.cfg.batch_size):
                    loss = self.train_step(batch)
                    for cb in self.callbacks:
                        cb.on_step_end(self, self.global_step, loss)
            self.sched.step()
            metrics = self.evaluate(val_data)
            for cb in self.callbacks:
                cb.on_epoch_end(self, epoch, metrics)
            if self.should_stop:
                break
        return self


def main():
    cfg = FlowConfig()
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    train_data = make_mixture(cfg.n_train, cfg.dim, gen)
    val_data = make_mixture(cfg.n_val, cfg.dim, gen)
    model = Glow(cfg)
    trainer = FlowTrainer(model, cfg, callbacks=[LoggingCallback(cfg.log_every), EarlyStopping(cfg.patience)])
    trainer.fit(train_data, val_data)
    samples = model.sample(512)
    print("sample mean", samples.mean(0).numpy().round(2))
    print("sample std ", samples.std(0).numpy().round(2))


if __name__ == "__main__":
    main()
