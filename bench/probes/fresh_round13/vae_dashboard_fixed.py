# expect: clean
# source: https://github.com/fossasia/visdom/issues/366
"""VAE training loop with a visdom-style live dashboard.

`Dashboard` mirrors visdom's client: every plotting entry point is wrapped
by `pytorch_wrap`, which turns torch tensors into numpy arrays before the
payload is serialised.  Here the payload is kept in memory instead of being
sent to a server.  A callback pushes losses and reconstructions to the
dashboard every few iterations.
"""
import json
import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    seed: int = 0
    batch_size: int = 16
    latent_dim: int = 4
    image_size: int = 8
    lr: float = 2e-3
    epochs: int = 2
    steps_per_epoch: int = 6
    log_images_every: int = 3
    env: str = "vae"
    tags: list = field(default_factory=lambda: ["mnist-like", "synthetic"])


def pytorch_wrap(fn):
    def result(*args, **kwargs):
        args = (a.cpu().detach().numpy() if type(a).__module__.startswith('torch') else a for a in args)
        for k in ['X', 'Y', 'Z', 'opts']:
            if k in kwargs and type(kwargs[k]).__module__.startswith('torch'):
                kwargs[k] = kwargs[k].cpu().detach().numpy()
        return fn(*args, **kwargs)
    return result


class Dashboard:
    """In-memory stand-in for visdom.Visdom (no server, same API shape)."""

    def __init__(self, env):
        self.env = env
        self.windows = {}

    def _send(self, win, kind, payload):
        self.windows.setdefault(win, []).append({"kind": kind, "payload": payload})
        return win

    @pytorch_wrap
    def line(self, Y, X=None, win=None, opts=None):
        y = np.asarray(Y, dtype=float).reshape(-1)
        x = np.arange(len(y)) if X is None else np.asarray(X).reshape(-1)
        return self._send(win, "line", {"x": x.tolist(), "y": y.tolist(), "opts": opts or {}})

    @pytorch_wrap
    def images(self, tensor, nrow=8, win=None, opts=None):
        arr = np.clip(tensor, 0.0, 1.0)
        stats = {"shape": list(arr.shape), "mean": float(arr.mean()), "nrow": nrow}
        return self._send(win, "images", stats)

    def dump(self):
        return json.dumps({k: len(v) for k, v in self.windows.items()})


class VAE(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg.image_size * cfg.image_size
        self.enc = nn.Sequential(nn.Linear(d, 32), nn.ReLU())
        self.mu = nn.Linear(32, cfg.latent_dim)
        self.logvar = nn.Linear(32, cfg.latent_dim)
        self.dec = nn.Sequential(nn.Linear(cfg.latent_dim, 32), nn.ReLU(), nn.Linear(32, d))
        self.image_size = cfg.image_size

    def forward(self, x):
        h = self.enc(x.flatten(1))
        mu, logvar = self.mu(h), self.logvar(h)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        recon = torch.sigmoid(self.dec(z)).view(-1, 1, self.image_size, self.image_size)
        return recon, mu, logvar

    def loss_function(self, recon, x, mu, logvar):
        bce = F.binary_cross_entropy(recon, x, reduction="sum")
        kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
        return (bce + kld) / x.shape[0]


class DashboardCallback:
    def __init__(self, viz, cfg):
        self.viz, self.cfg = viz, cfg
        self.history = []

    def on_batch_end(self, trainer, batch, outputs, loss):
        self.history.append(loss.item())
        self.viz.line(Y=np.array(self.history), win="loss", opts={"title": "train loss"})
        if trainer.global_step % self.cfg.log_images_every == 0:
            recon = outputs[0]
            self.viz.images(recon[:8], nrow=4, win="recon", opts={"title": "reconstructions"})

    def on_epoch_end(self, trainer, epoch):
        mean = float(np.mean(self.history[-self.cfg.steps_per_epoch:]))
        self.viz.line(Y=np.array([mean]), X=np.array([epoch]), win="epoch", opts={"title": "epoch loss"})


class Trainer:
    def __init__(self, model, cfg, callbacks):
        self.model, self.cfg, self.callbacks = model, cfg, callbacks
        self.optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
        self.global_step = 0

    def batches(self):
        g = torch.Generator().manual_seed(self.cfg.seed)
        for _ in range(self.cfg.steps_per_epoch):
            yield torch.rand(self.cfg.batch_size, 1, self.cfg.image_size, self.cfg.image_size, generator=g)

    def fit(self):
        for epoch in range(self.cfg.epochs):
            self.model.train()
            for batch in self.batches():
                outputs = self.model(batch)
                loss = self.model.loss_function(outputs[0], batch, outputs[1], outputs[2])
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
                self.global_step += 1
                for cb in self.callbacks:
                    cb.on_batch_end(self, batch, outputs, loss)
            for cb in self.callbacks:
                cb.on_epoch_end(self, epoch)
            print(f"epoch {epoch}: last loss {loss.item():.3f}")


def main():
    cfg = Config()
    torch.manual_seed(cfg.seed)
    viz = Dashboard(cfg.env)
    model = VAE(cfg)
    trainer = Trainer(model, cfg, [DashboardCallback(viz, cfg)])
    trainer.fit()
    print("windows:", viz.dump(), "steps:", trainer.global_step, "pi~", round(math.pi, 2))


if __name__ == "__main__":
    main()
