# expect: clean
# source: https://github.com/scart97/Siren-fastai2/issues/2
"""SIREN image fitting with gradient supervision, written as a small fastai-style training loop.

A SIREN (sine layers with the paper's initialisation) maps pixel coordinates to intensities.  The
model is supervised on the image gradient (Sobel filter, scaled by 10 as in the paper's appendix)
instead of the pixel values.  The code mimics a fastai v2 port: a `DataBunch` of coordinate /
target tensors, a `Learner` with callbacks (recorder, LR scheduler, gradient clipping), a loss
function object, one-cycle scheduling and a `fit()` entry point.  A synthetic image stands in for
the cameraman picture.
"""
import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class SirenConfig:
    sidelength: int = 24
    hidden_features: int = 64
    hidden_layers: int = 2
    first_omega_0: float = 30.0
    hidden_omega_0: float = 30.0
    lr: float = 1e-4
    epochs: int = 3
    steps_per_epoch: int = 4
    grad_scale: float = 10.0
    clip: float = 1.0
    metrics: list = field(default_factory=lambda: ["psnr"])


class SineLayer(nn.Module):
    def __init__(self, in_features, out_features, bias=True, is_first=False, omega_0=30.0):
        super().__init__()
        self.omega_0, self.is_first, self.in_features = omega_0, is_first, in_features
        self.linear = nn.Linear(in_features, out_features, bias=bias)
        self.init_weights()

    def init_weights(self):
        with torch.no_grad():
            bound = 1 / self.in_features if self.is_first else np.sqrt(6 / self.in_features) / self.omega_0
            self.linear.weight.uniform_(-bound, bound)

    def forward(self, x):
        return torch.sin(self.omega_0 * self.linear(x))


class Siren(nn.Module):
    def __init__(self, cfg, in_features=2, out_features=1):
        super().__init__()
        layers = [SineLayer(in_features, cfg.hidden_features, is_first=True, omega_0=cfg.first_omega_0)]
        for _ in range(cfg.hidden_layers):
            layers.append(SineLayer(cfg.hidden_features, cfg.hidden_features, omega_0=cfg.hidden_omega_0))
        final = nn.Linear(cfg.hidden_features, out_features)
        with torch.no_grad():
            bound = np.sqrt(6 / cfg.hidden_features) / cfg.hidden_omega_0
            final.weight.uniform_(-bound, bound)
        layers.append(final)
        self.net = nn.Sequential(*layers)

    def forward(self, coords):
        coords = coords.clone().detach().requires_grad_(True)
        return self.net(coords), coords


def gradient(y, x):
    grad_outputs = torch.ones_like(y)
    return torch.autograd.grad(y, [x], grad_outputs=grad_outputs, create_graph=True)[0]


def get_mgrid(sidelen, dim=2):
    tensors = tuple(dim * [torch.linspace(-1, 1, steps=sidelen)])
    mgrid = torch.stack(torch.meshgrid(*tensors, indexing="ij"), dim=-1)
    return mgrid.reshape(-1, dim)


def synthetic_image(sidelen):
    x = torch.linspace(-1, 1, sidelen)
    xx, yy = torch.meshgrid(x, x, indexing="ij")
    img = torch.sin(4 * xx) * torch.cos(3 * yy) + 0.5 * torch.exp(-8 * (xx ** 2 + yy ** 2))
    return ((img - img.min()) / (img.max() - img.min()) - 0.5) * 2


def sobel_gradients(img, scale):
    kx = torch.tensor([[1.0, 0.0, -1.0], [2.0, 0.0, -2.0], [1.0, 0.0, -1.0]])
    k = torch.stack([kx, kx.t()]).unsqueeze(1)
    grads = F.conv2d(img[None, None], k, padding=1)[0]
    return grads.permute(1, 2, 0).reshape(-1, 2) * scale


class DataBunch:
    def __init__(self, cfg):
        img = synthetic_image(cfg.sidelength)
        self.coords = get_mgrid(cfg.sidelength)
        self.pixels = img.reshape(-1, 1)
        self.grads = sobel_gradients(img, cfg.grad_scale)

    def train_dl(self):
        yield self.coords[None], {"grads": self.grads[None], "pixels": self.pixels[None]}


class GradientLoss:
    def __call__(self, model_output, coords, target):
        img_grad = gradient(model_output, coords)
        return ((img_grad - target["grads"]) ** 2).mean()


class Callback:
    def before_fit(self, learn): pass
    def after_backward(self, learn): pass
    def after_batch(self, learn): pass
    def after_epoch(self, learn): pass


class Recorder(Callback):
    def before_fit(self, learn):
        self.losses, self.psnrs = [], []

    def after_batch(self, learn):
        self.losses.append(learn.loss.item())
        with torch.no_grad():
            mse = F.mse_loss(learn.pred, learn.target["pixels"] - learn.target["pixels"].mean())
            self.psnrs.append(10 * math.log10(4.0 / max(mse.item(), 1e-10)))

    def after_epoch(self, learn):
        print(f"epoch {learn.epoch}: loss {np.mean(self.losses[-learn.cfg.steps_per_epoch:]):.5f} "
              f"psnr {self.psnrs[-1]:.2f}")


class GradientClip(Callback):
    def after_backward(self, learn):
        nn.utils.clip_grad_norm_(learn.model.parameters(), learn.cfg.clip)


class OneCycle(Callback):
    def before_fit(self, learn):
        total = learn.cfg.epochs * learn.cfg.steps_per_epoch
        self.sched = torch.optim.lr_scheduler.OneCycleLR(learn.opt, max_lr=learn.cfg.lr * 10, total_steps=total)

    def after_batch(self, learn):
        self.sched.step()


class Learner:
    def __init__(self, data, model, loss_func, cfg, cbs=()):
        self.data, self.model, self.loss_func, self.cfg = data, model, loss_func, cfg
        self.opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
        self.cbs = list(cbs)

    def _run(self, event):
        for cb in self.cbs:
            getattr(cb, event)(self)

    def train_step(self, xb, yb):
        self.pred, coords = self.model(xb)
        self.target = yb
        self.loss = self.loss_func(self.pred, coords, yb)
        self.opt.zero_grad()
        self.loss.backward()
        self._run("after_backward")
        self.opt.step()
        self._run("after_batch")

    def fit(self):
        self._run("before_fit")
        for self.epoch in range(self.cfg.epochs):
            self.model.train()
            for _ in range(self.cfg.steps_per_epoch):
                for xb, yb in self.data.train_dl():
                    self.train_step(xb, yb)
            self._run("after_epoch")


def main():
    torch.manual_seed(0)
    cfg = SirenConfig()
    learn = Learner(DataBunch(cfg), Siren(cfg), GradientLoss(), cfg, cbs=[Recorder(), GradientClip(), OneCycle()])
    learn.fit()


if __name__ == "__main__":
    main()
