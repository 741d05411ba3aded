# expect: clean
# source: https://github.com/fastai/fastai/pull/761
"""Neural style transfer with forward hooks on a frozen VGG-style feature extractor.

Three stages, as in the course notebook:
  1. content reconstruction  (one hook on a late block)
  2. style reconstruction    (hooks on every block end, Gram matrices)
  3. style transfer          (content + style)
Each stage optimises the pixels of an image with L-BFGS.
"""
import math
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class TransferConfig:
    size: int = 32
    channels: tuple = (8, 16, 24, 32)
    max_iter: int = 6
    show_iter: int = 3
    content_layer: int = 3
    content_weight: float = 1e6
    style_weights: list = field(default_factory=lambda: [1.0, 1.0, 1.0, 1.0])
    lr: float = 0.5
    seed: int = 0


def set_trainable(m, b):
    for p in m.parameters():
        p.requires_grad_(b)


def children(m):
    return list(m.children())


class MiniVGG(nn.Module):
    """A small VGG-like feature extractor: conv-relu-conv-relu-pool blocks."""

    def __init__(self, channels):
        super().__init__()
        layers, c_in = [], 3
        for c in channels:
            layers += [nn.Conv2d(c_in, c, 3, padding=1), nn.ReLU(),
                       nn.Conv2d(c, c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)]
            c_in = c
        self.features = nn.Sequential(*layers)

    def forward(self, x):
        return self.features(x)


class SaveFeatures:
    """Keeps the output of a module from the last forward pass."""
    features = None

    def __init__(self, m):
        self.hook = m.register_forward_hook(self.hook_fn)

    def hook_fn(self, module, input, output):
        self.features = output

    def close(self):
        self.hook.remove()


def gram(input):
    b, c, h, w = input.size()
    x = input.view(b * c, -1)
    return torch.mm(x, x.t()) / input.numel() * 1e6


def gram_mse_loss(input, target):
    return F.mse_loss(gram(input), gram(target))


class StyleTransfer:
    def __init__(self, cfg, content_img, style_img):
        self.cfg = cfg
        self.m_vgg = MiniVGG(cfg.channels).eval()
        set_trainable(self.m_vgg, False)
        feats = children(self.m_vgg.features)
        # block ends are the ReLUs right before each max-pool
        self.block_ends = [i - 1 for i, o in enumerate(feats) if isinstance(o, nn.MaxPool2d)]
        self.content_img = content_img
        self.style_img = style_img
        self.n_iter = 0
        self.history = {}

    def layer(self, idx):
        return children(self.m_vgg.features)[idx]

    def get_opt(self):
        g = torch.Generator().manual_seed(self.cfg.seed)
        opt_img = torch.rand(1, 3, self.cfg.size, self.cfg.size, generator=g)
        opt_img = F.avg_pool2d(opt_img, 3, stride=1, padding=1)
        opt_img_v = nn.Parameter(opt_img)
        return opt_img_v, torch.optim.LBFGS([opt_img_v], lr=self.cfg.lr)

    def step(self, loss_fn, opt_img_v, optimizer, stage):
        optimizer.zero_grad()
        loss = loss_fn(opt_img_v)
        loss.backward()
        self.n_iter += 1
        if self.n_iter % self.cfg.show_iter == 0:
            self.history.setdefault(stage, []).append(loss.item())
        return loss

    def run_stage(self, loss_fn, stage):
        opt_img_v, optimizer = self.get_opt()
        self.n_iter = 0
        closure = partial(self.step, loss_fn, opt_img_v, optimizer, stage)
        while self.n_iter <= self.cfg.max_iter:
            optimizer.step(closure)
        return opt_img_v

    # ---- stage 1: content -------------------------------------------------
    def content_reconstruction(self):
        sf = SaveFeatures(self.layer(self.block_ends[self.cfg.content_layer]))
        with torch.no_grad():
            self.m_vgg(self.content_img)
            targ_v = sf.features.clone()

        def actn_loss(x):
            self.m_vgg(x)
            return F.mse_loss(sf.features, targ_v) * 1000

        out = self.run_stage(actn_loss, "content")
        sf.close()
        return out

    # ---- stage 2: style ---------------------------------------------------
    def style_reconstruction(self):
        self.sfs = [SaveFeatures(self.layer(idx)) for idx in self.block_ends]
        with torch.no_grad():
            self.m_vgg(self.content_img)
            self.targ_vs = [o.features.clone() for o in self.sfs]
            self.m_vgg(self.style_img)
            self.targ_styles = [o.features.clone() for o in self.sfs]

        def style_loss(x):
            self.m_vgg(x)
            outs = [o.features for o in self.sfs]
            losses = [w * gram_mse_loss(o, s)
                      for w, o, s in zip(self.cfg.style_weights, outs, self.targ_styles)]
            return sum(losses)

        out = self.run_stage(style_loss, "style")
        for sf in self.sfs:
            sf.close()
        return out

    # ---- stage 3: transfer ------------------------------------------------
    def style_transfer(self):
        cl = self.cfg.content_layer
        self.sfs = [SaveFeatures(self.layer(idx)) for idx in self.block_ends]

        def comb_loss(x):
            self.m_vgg(x)
            outs = [o.features for o in self.sfs]
            losses = [w * gram_mse_loss(o, s)
                      for w, o, s in zip(self.cfg.style_weights, outs, self.targ_styles)]
            cnt_loss = F.mse_loss(outs[cl], self.targ_vs[cl]) * self.cfg.content_weight
            style_loss = sum(losses)
            return cnt_loss + style_loss

        out = self.run_stage(comb_loss, "transfer")
        for sf in self.sfs:
            sf.close()
        return out


def make_images(size, seed):
    rng = np.random.RandomState(seed)
    yy, xx = np.mgrid[0:size, 0:size] / size
    content = np.stack([np.sin(4 * math.pi * xx), np.cos(3 * math.pi * yy), xx * yy])
    stripes = (np.sin(12 * math.pi * (xx + yy)) > 0).astype(np.float64)
    style = np.stack([stripes, 1 - stripes, rng.rand(size, size)])
    to_t = lambda a: torch.tensor(a, dtype=torch.float32)[None]
    return to_t(content), to_t(style)


def main():
    cfg = TransferConfig()
    torch.manual_seed(cfg.seed)
    content, style = make_images(cfg.size, cfg.seed)
    st = StyleTransfer(cfg, content, style)
    st.content_reconstruction()
    st.style_reconstruction()
    result = st.style_transfer()
    print("final image stats", float(result.mean()), float(result.std()))
    for k, v in st.history.items():
        print(k, ["%.3f" % x for x in v])


main()
