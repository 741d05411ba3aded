# expect: inplace_version
# source: https://github.com/pytorch/pytorch/issues/39141
"""Adversarial unsupervised domain adaptation (DANN-style, label-flip variant).

The domain discriminator is trained with its own optimizer to tell source
features from target features; the feature extractor is trained to classify
source samples and to fool the discriminator (inverted domain labels instead
of a gradient reversal layer, as in ADDA / GAN-style DA).
"""
import math
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIG = {
    "data": {"in_dim": 20, "num_classes": 4, "batch_size": 32, "shift": 0.8},
    "model": {"feat_dim": 32, "hidden": 64, "disc_hidden": 48},
    "optim": {
        "main": {"lr": 1e-3, "betas": (0.9, 0.999)},
        "disc": {"lr": 2e-3, "betas": (0.5, 0.999)},
    },
    "train": {"iters": 6, "adv_weight": 1.0, "log_interval": 2, "seed": 7},
}


def set_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class FeatureExtractor(nn.Module):
    def __init__(self, in_dim, hidden, feat_dim):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
            nn.Linear(hidden, feat_dim), nn.ReLU(),
        )

    def forward(self, x):
        return self.net(x)


class DomainDiscriminator(nn.Module):
    def __init__(self, feat_dim, hidden):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(feat_dim, hidden), nn.LeakyReLU(0.2),
            nn.Linear(hidden, hidden), nn.LeakyReLU(0.2),
            nn.Linear(hidden, 1),
        )

    def forward(self, f):
        return self.layers(f).squeeze(-1)


class DomainShiftSampler:
    """Source/target batches drawn from class-conditional Gaussians; target is shifted."""

    def __init__(self, in_dim, num_classes, shift):
        g = torch.Generator().manual_seed(0)
        self.means = torch.randn(num_classes, in_dim, generator=g) * 2.0
        self.shift = shift * torch.randn(in_dim, generator=g)
        self.num_classes = num_classes

    def sample(self, n, target=False):
        y = torch.randint(0, self.num_classes, (n,))
        x = self.means[y] + torch.randn(n, self.means.shape[1])
        if target:
            x = x + self.shift
        return x, y


class DomainAdaptationTrainer:
    def __init__(self, cfg):
        self.cfg = cfg
        d, m = cfg["data"], cfg["model"]
        self.sampler = DomainShiftSampler(d["in_dim"], d["num_classes"], d["shift"])
        self.extractor = FeatureExtractor(d["in_dim"], m["hidden"], m["feat_dim"])
        self.classifier = nn.Linear(m["feat_dim"], d["num_classes"])
        self.discriminator = DomainDiscriminator(m["feat_dim"], m["disc_hidden"])

        main_params = list(self.extractor.parameters()) + list(self.classifier.parameters())
        self.opt_main = torch.optim.Adam(main_params, **cfg["optim"]["main"])
        self.opt_disc = torch.optim.Adam(self.discriminator.parameters(), **cfg["optim"]["disc"])
        self.history = {"cls": [], "disc": [], "adv": []}
        self.step = 0

        self._grad_norm = None
        self._feat_hook = None

    def _record_feature_grad(self, grad):
        self._grad_norm = grad.norm().item()

    @staticmethod
    def _domain_targets(n_src, n_tgt, flip=False):
        src = torch.zeros(n_src) if flip else torch.ones(n_src)
        tgt = torch.ones(n_tgt) if flip else torch.zeros(n_tgt)
        return torch.cat([src, tgt])

    def adaptation_factor(self):
        p = self.step / max(1, self.cfg["train"]["iters"])
        return 2.0 / (1.0 + math.exp(-10 * p)) - 1.0

    def compute_losses(self, xs, ys, xt):
        f_s = self.extractor(xs)
        f_t = self.extractor(xt)
        feats = torch.cat([f_s, f_t])
        feats.register_hook(self._record_feature_grad)

        cls_loss = F.cross_entropy(self.classifier(f_s), ys)
        n_s, n_t = xs.shape[0], xt.shape[0]
        # discriminator sees detached features; the extractor is trained to fool it
        disc_loss = F.binary_cross_entropy_with_logits(
            self.discriminator(feats.detach()), self._domain_targets(n_s, n_t))
        adv_loss = F.binary_cross_entropy_with_logits(
            self.discriminator(feats), self._domain_targets(n_s, n_t, flip=True))
        return {"cls": cls_loss, "disc": disc_loss, "adv": adv_loss}

    def _update_discriminator(self, losses):
        self.opt_disc.zero_grad()
        losses["disc"].backward()
        self.opt_disc.step()

    def _update_main(self, losses):
        lam = self.cfg["train"]["adv_weight"] * self.adaptation_factor()
        total = losses["cls"] + lam * losses["adv"]
        self.opt_main.zero_grad()
        total.backward()  # raises
        self.opt_main.step()

    def train_step(self):
        bs = self.cfg["data"]["batch_size"]
        xs, ys = self.sampler.sample(bs)
        xt, _ = self.sampler.sample(bs, target=True)
        losses = self.compute_losses(xs, ys, xt)
        self._update_discriminator(losses)
        self._update_main(losses)
        for k, v in losses.items():
            self.history[k].append(v.item())
        self.step += 1

    @torch.no_grad()
    def target_accuracy(self, n=256):
        self.extractor.eval()
        xt, yt = self.sampler.sample(n, target=True)
        acc = (self.classifier(self.extractor(xt)).argmax(1) == yt).float().mean().item()
        self.extractor.train()
        return acc

    def fit(self):
        t = self.cfg["train"]
        for it in range(t["iters"]):
            self.train_step()
            if (it + 1) % t["log_interval"] == 0:
                print(f"iter {it + 1}: cls={self.history['cls'][-1]:.3f} "
                      f"disc={self.history['disc'][-1]:.3f} adv={self.history['adv'][-1]:.3f} "
                      f"|grad f|={self._grad_norm:.4f}")
        print(f"target accuracy: {self.target_accuracy():.3f}")


def main():
    set_seed(CONFIG["train"]["seed"])
    DomainAdaptationTrainer(CONFIG).fit()


if __name__ == "__main__":
    main()
