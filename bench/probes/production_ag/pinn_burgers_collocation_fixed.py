# expect: clean
# source: https://github.com/pytorch/pytorch/issues/90158
"""Physics-informed neural network for the 1D viscous Burgers equation.

The network u(x, t) is trained on PDE residual points (collocation points),
initial-condition points and boundary points; the viscosity nu is learned as
an inverse-problem parameter with its own optimizer.  The point sets come from
a sampler object that caches them.  Synthetic data only, CPU.
"""
import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn as nn


@dataclass
class PINNConfig:
    n_interior: int = 256
    n_initial: int = 64
    n_boundary: int = 64
    x_min: float = -1.0
    x_max: float = 1.0
    t_min: float = 1.0          # time window used by the experiment
    t_max: float = 4.0
    hidden: int = 32
    depth: int = 3
    fourier_features: int = 8
    lr: float = 2e-3
    lr_nu: float = 1e-2
    epochs: int = 4
    log_every: int = 1
    w_pde: float = 1.0
    w_ic: float = 10.0
    w_bc: float = 10.0
    nu_init: float = 0.05
    seed: int = 0
    milestones: list = field(default_factory=lambda: [2, 3])


def set_seed(seed):
    torch.manual_seed(seed)
    np.random.seed(seed)


class FourierEmbedding(nn.Module):
    """Random Fourier features for (x, t) inputs."""

    def __init__(self, in_dim, n_feats, scale=1.0):
        super().__init__()
        self.register_buffer("B", torch.randn(in_dim, n_feats) * scale)

    @property
    def out_dim(self):
        return 2 * self.B.shape[1] + self.B.shape[0]

    def forward(self, xt):
        proj = 2 * math.pi * xt @ self.B
        return torch.cat([xt, torch.sin(proj), torch.cos(proj)], dim=-1)


class PINN(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed = FourierEmbedding(2, cfg.fourier_features)
        layers = []
        d = self.embed.out_dim
        for _ in range(cfg.depth):
            layers += [nn.Linear(d, cfg.hidden), nn.Tanh()]
            d = cfg.hidden
        layers.append(nn.Linear(d, 1))
        self.net = nn.Sequential(*layers)
        # learnable viscosity (log-parametrised so it stays positive)
        self.log_nu = nn.Parameter(torch.tensor(math.log(cfg.nu_init)))

    @property
    def nu(self):
        return self.log_nu.exp()

    def forward(self, x, t):
        return self.net(self.embed(torch.cat([x, t], dim=-1)))


def gradient(y, x):
    return torch.autograd.grad(y, x, grad_outputs=torch.ones_like(y), create_graph=True)[0]


def burgers_residual(model, x, t):
    u = model(x, t)
    u_t = gradient(u, t)
    u_x = gradient(u, x)
    u_xx = gradient(u_x, x)
    return u_t + u * u_x - model.nu * u_xx


class CollocationSampler:
    """Draws the residual / initial / boundary point sets and caches them."""

    def __init__(self, cfg):
        self.cfg = cfg
        self._cache = {}

    def _uniform(self, n, lo, hi):
        return (lo + (hi - lo) * torch.rand(n, 1)).requires_grad_()

    @property
    def interior(self):
        if "interior" not in self._cache:
            c = self.cfg
            x = self._uniform(c.n_interior, c.x_min, c.x_max)
            t = self._uniform(c.n_interior, c.t_min, c.t_max)
            self._cache["interior"] = (x, t)
        return self._cache["interior"]

    @property
    def initial(self):
        if "initial" not in self._cache:
            c = self.cfg
            x = torch.linspace(c.x_min, c.x_max, c.n_initial).unsqueeze(1)
            t = torch.full_like(x, c.t_min)
            u0 = -torch.sin(math.pi * x)
            self._cache["initial"] = (x, t, u0)
        return self._cache["initial"]

    @property
    def boundary(self):
        if "boundary" not in self._cache:
            c = self.cfg
            t = torch.linspace(c.t_min, c.t_max, c.n_boundary).unsqueeze(1)
            x = torch.cat([torch.full((c.n_boundary // 2, 1), c.x_min),
                           torch.full((c.n_boundary - c.n_boundary // 2, 1), c.x_max)])
            self._cache["boundary"] = (x, t, torch.zeros_like(t))
        return self._cache["boundary"]


class LossHistory:
    def __init__(self):
        self.records = []

    def on_epoch_end(self, trainer, epoch, logs):
        self.records.append(dict(epoch=epoch, **logs))


class PrintLogger:
    def __init__(self, every):
        self.every = every

    def on_epoch_end(self, trainer, epoch, logs):
        if epoch % self.every == 0:
            parts = " ".join(f"{k}={v:.4f}" for k, v in logs.items())
            print(f"[epoch {epoch}] {parts}")


class PINNTrainer:
    def __init__(self, cfg, model, sampler, callbacks=()):
        self.cfg = cfg
        self.model = model
        self.sampler = sampler
        self.callbacks = list(callbacks)
        net_params = [p for n, p in model.named_parameters() if n != "log_nu"]
        self.opt_net = torch.optim.Adam(net_params, lr=cfg.lr)
        self.opt_nu = torch.optim.Adam([model.log_nu], lr=cfg.lr_nu)
        self.sched = torch.optim.lr_scheduler.MultiStepLR(self.opt_net, cfg.milestones, gamma=0.5)
        self.mse = nn.MSELoss()

    def compute_losses(self):
        x_r, t_r = self.sampler.interior
        res = burgers_residual(self.model, x_r, t_r)
        loss_pde = (res ** 2).mean()
        x0, t0, u0 = self.sampler.initial
        loss_ic = self.mse(self.model(x0, t0), u0)
        xb, tb, ub = self.sampler.boundary
        loss_bc = self.mse(self.model(xb, tb), ub)
        return loss_pde, loss_ic, loss_bc

    def train_step(self):
        self.model.train()
        self.opt_net.zero_grad()
        self.opt_nu.zero_grad()
        loss_pde, loss_ic, loss_bc = self.compute_losses()
        c = self.cfg
        loss = c.w_pde * loss_pde + c.w_ic * loss_ic + c.w_bc * loss_bc
        loss.backward()
        self.opt_net.step()
        self.opt_nu.step()
        return dict(loss=loss.item(), pde=loss_pde.item(), ic=loss_ic.item(),
                    bc=loss_bc.item(), nu=self.model.nu.item())

    def evaluate(self, n=128):
        self.model.eval()
        x = torch.linspace(self.cfg.x_min, self.cfg.x_max, n).unsqueeze(1).requires_grad_()
        t = torch.full_like(x, 0.5 * (self.cfg.t_min + self.cfg.t_max)).requires_grad_()
        with torch.enable_grad():
            res = burgers_residual(self.model, x, t)
        return res.detach().abs().mean().item()

    def fit(self):
        for epoch in range(1, self.cfg.epochs + 1):
            start = time.time()
            logs = self.train_step()
            self.sched.step()
            logs["val_res"] = self.evaluate()
            logs["sec"] = time.time() - start
            for cb in self.callbacks:
                cb.on_epoch_end(self, epoch, logs)
        return self.model


def main():
    cfg = PINNConfig()
    set_seed(cfg.seed)
    model = PINN(cfg)
    sampler = CollocationSampler(cfg)
    history = LossHistory()
    trainer = PINNTrainer(cfg, model, sampler, callbacks=[history, PrintLogger(cfg.log_every)])
    trainer.fit()
    print("final nu:", model.nu.item(), "epochs logged:", len(history.records))


if __name__ == "__main__":
    main()
