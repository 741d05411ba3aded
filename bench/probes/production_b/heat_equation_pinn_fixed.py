# expect: clean
# source: https://github.com/rezaakb/pinns-torch/issues/12
"""Physics-informed network for the 1-D heat equation u_t = alpha * u_xx.

A small Lightning-like trainer runs Adam epochs with periodic validation
(PDE residual and error against the closed-form solution) and finishes
with an L-BFGS polish.
"""
import functools
import math
import time
from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class PDEConfig:
    alpha: float = 0.1
    n_collocation: int = 256
    n_boundary: int = 64
    n_initial: int = 64
    n_val: int = 128


@dataclass
class TrainerConfig:
    max_epochs: int = 4
    steps_per_epoch: int = 5
    lr: float = 2e-3
    lbfgs_iters: int = 5
    check_val_every_n_epoch: int = 1
    inference_mode: bool = False
    loss_weights: tuple = (1.0, 10.0, 10.0)


def gradient(outputs, inputs):
    return torch.autograd.grad(outputs, inputs, grad_outputs=torch.ones_like(outputs), create_graph=True)[0]


def exact_solution(x, t, alpha):
    return torch.exp(-alpha * math.pi ** 2 * t) * torch.sin(math.pi * x)


class MLP(nn.Module):
    def __init__(self, layers=(2, 32, 32, 32, 1)):
        super().__init__()
        blocks = []
        for a, b in zip(layers[:-2], layers[1:-1]):
            blocks.append(nn.Sequential(nn.Linear(a, b), nn.Tanh()))
        self.blocks = nn.ModuleList(blocks)
        self.out = nn.Linear(layers[-2], layers[-1])
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_normal_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, xt):
        h = xt
        for blk in self.blocks:
            h = blk(h)
        return self.out(h)


class HeatPINN(nn.Module):
    def __init__(self, pde: PDEConfig):
        super().__init__()
        self.pde = pde
        self.net = MLP()

    def forward(self, xt):
        return self.net(xt)

    def pde_residual(self, xt):
        u = self(xt)
        du = gradient(u, xt)
        u_x, u_t = du[:, :1], du[:, 1:]
        u_xx = gradient(u_x, xt)[:, :1]
        return u_t - self.pde.alpha * u_xx

    def training_step(self, batch, weights):
        xt_f, xt_b, xt_0, u_0 = batch
        xt_f = xt_f.clone().requires_grad_(True)
        loss_f = self.pde_residual(xt_f).pow(2).mean()
        loss_b = self(xt_b).pow(2).mean()
        loss_0 = (self(xt_0) - u_0).pow(2).mean()
        return weights[0] * loss_f + weights[1] * loss_b + weights[2] * loss_0

    def validation_step(self, xt):
        with torch.enable_grad():
            xt = xt.clone().requires_grad_(True)
            residual = self.pde_residual(xt)
        u_pred = self(xt)
        u_true = exact_solution(xt[:, :1], xt[:, 1:], self.pde.alpha)
        rel_l2 = (u_pred - u_true).norm() / u_true.norm()
        return {"val/residual": residual.pow(2).mean().item(), "val/rel_l2": rel_l2.item()}


class Sampler:
    def __init__(self, pde: PDEConfig, seed=0):
        self.pde = pde
        self.g = torch.Generator().manual_seed(seed)

    def collocation(self):
        return torch.rand(self.pde.n_collocation, 2, generator=self.g)

    def boundary(self):
        t = torch.rand(self.pde.n_boundary, 1, generator=self.g)
        x = (torch.rand(self.pde.n_boundary, 1, generator=self.g) > 0.5).float()
        return torch.cat([x, t], 1)

    def initial(self):
        x = torch.rand(self.pde.n_initial, 1, generator=self.g)
        xt = torch.cat([x, torch.zeros_like(x)], 1)
        return xt, torch.sin(math.pi * x)

    def batch(self):
        xt_0, u_0 = self.initial()
        return self.collocation(), self.boundary(), xt_0, u_0


def evaluation_context(fn):
    @functools.wraps(fn)
    def wrapper(trainer, *args, **kwargs):
        ctx = torch.inference_mode() if trainer.cfg.inference_mode else torch.no_grad()
        with ctx:
            return fn(trainer, *args, **kwargs)
    return wrapper


class Trainer:
    def __init__(self, cfg: TrainerConfig):
        self.cfg = cfg
        self.logged = []

    def log(self, epoch, metrics):
        self.logged.append((epoch, metrics))
        print(f"epoch {epoch:02d} " + " ".join(f"{k}={v:.3e}" for k, v in metrics.items()))

    @evaluation_context
    def validate(self, module, val_points):
        module.eval()
        out = module.validation_step(val_points)
        module.train()
        return out

    def fit(self, module, sampler, val_points):
        opt = torch.optim.Adam(module.parameters(), lr=self.cfg.lr)
        sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)
        t0 = time.time()
        for epoch in range(self.cfg.max_epochs):
            running = 0.0
            for _ in range(self.cfg.steps_per_epoch):
                opt.zero_grad()
                loss = module.training_step(sampler.batch(), self.cfg.loss_weights)
                loss.backward()
                opt.step()
                running += loss.item()
            sched.step()
            metrics = {"train/loss": running / self.cfg.steps_per_epoch}
            if (epoch + 1) % self.cfg.check_val_every_n_epoch == 0:
                metrics.update(self.validate(module, val_points))
            self.log(epoch, metrics)

        batch = sampler.batch()
        lbfgs = torch.optim.LBFGS(module.parameters(), lr=0.5, max_iter=self.cfg.lbfgs_iters,
                                  line_search_fn="strong_wolfe")

        def closure():
            lbfgs.zero_grad()
            loss = module.training_step(batch, self.cfg.loss_weights)
            loss.backward()
            return loss

        final = lbfgs.step(closure)
        metrics = {"train/loss": final.item()}
        metrics.update(self.validate(module, val_points))
        self.log(self.cfg.max_epochs, metrics)
        print(f"total time {time.time() - t0:.2f}s")


if __name__ == "__main__":
    torch.manual_seed(0)
    pde = PDEConfig()
    sampler = Sampler(pde)
    val_points = torch.rand(pde.n_val, 2, generator=torch.Generator().manual_seed(7))
    Trainer(TrainerConfig()).fit(HeatPINN(pde), sampler, val_points)
