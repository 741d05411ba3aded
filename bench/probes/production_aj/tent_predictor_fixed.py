# expect: clean
# source: https://github.com/replicate/cog/issues/1681
"""Test-time domain adaptation (TENT) served behind a cog-style Predictor.

A small BN-CNN is trained on a synthetic "source" domain (clean 3-channel blobs, 4
classes).  At serving time the target domain is shifted (contrast, colour cast and
noise); the Predictor adapts the BatchNorm affine parameters on every request by
minimising the prediction entropy for a few steps (TENT), then returns the labels.
The cog pieces (BasePredictor, Input, setup / predict, a request runner) are
re-implemented here in miniature.  Synthetic data, CPU only.
"""
import copy
import random
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CFG = SimpleNamespace(seed=3, num_classes=4, image_size=16, train_steps=30, batch_size=32,
                      lr=3e-3, tent_lr=1e-3, tent_steps=2, episodic=True, requests=3)


def set_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# --------------------------------------------------------------------------- data
def make_images(n, cfg, shift=False, generator=None):
    labels = torch.randint(0, cfg.num_classes, (n,), generator=generator)
    yy, xx = torch.meshgrid(torch.arange(cfg.image_size), torch.arange(cfg.image_size), indexing='ij')
    centers = torch.tensor([[4, 4], [4, 11], [11, 4], [11, 11]], dtype=torch.float32)
    c = centers[labels]
    blob = torch.exp(-((yy[None] - c[:, 0, None, None]) ** 2 + (xx[None] - c[:, 1, None, None]) ** 2) / 8.0)
    x = blob[:, None].repeat(1, 3, 1, 1) + 0.1 * torch.randn(n, 3, cfg.image_size, cfg.image_size, generator=generator)
    if shift:
        x = 0.5 * x + torch.tensor([0.4, -0.2, 0.1])[None, :, None, None]
        x = x + 0.3 * torch.randn(x.shape, generator=generator)
    return x, labels


# -------------------------------------------------------------------------- model
class BNConvNet(nn.Module):
    def __init__(self, num_classes, width=16):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, width * 2, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(width * 2), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1))
        self.classifier = nn.Linear(width * 2, num_classes)

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))


def softmax_entropy(logits):
    return -(logits.softmax(1) * logits.log_softmax(1)).sum(1)


def configure_model(model):
    """TENT: train mode (batch statistics), only BN affine parameters are updated."""
    model.train()
    model.requires_grad_(False)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.requires_grad_(True)
            m.track_running_stats = False
            m.running_mean = None
            m.running_var = None
    return model


def collect_params(model):
    params, names = [], []
    for nm, m in model.named_modules():
        if isinstance(m, nn.BatchNorm2d):
            for np_, p in m.named_parameters():
                if np_ in ('weight', 'bias'):
                    params.append(p)
                    names.append(f"{nm}.{np_}")
    return params, names


class Tent(nn.Module):
    def __init__(self, model, optimizer, steps=1, episodic=False):
        super().__init__()
        self.model = model
        self.optimizer = optimizer
        self.steps = steps
        self.episodic = episodic
        self.model_state = copy.deepcopy(model.state_dict())
        self.optimizer_state = copy.deepcopy(optimizer.state_dict())

    def reset(self):
        self.model.load_state_dict(self.model_state, strict=True)
        self.optimizer.load_state_dict(self.optimizer_state)

    def forward_and_adapt(self, x):
        outputs = self.model(x)
        loss = softmax_entropy(outputs).mean(0)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        return outputs

    def forward(self, x):
        if self.episodic:
            self.reset()
        for _ in range(self.steps):
            outputs = self.forward_and_adapt(x)
        return outputs


# -------------------------------------------------------------- source training
class SourceTrainer:
    def __init__(self, cfg):
        self.cfg = cfg
        self.model = BNConvNet(cfg.num_classes)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=cfg.lr * 10, momentum=0.9)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=10, gamma=0.5)

    def train_step(self, x, y):
        self.model.train()
        loss = F.cross_entropy(self.model(x), y)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        return loss.item()

    @torch.no_grad()
    def evaluate(self, x, y):
        self.model.eval()
        return (self.model(x).argmax(1) == y).float().mean().item()

    def fit(self):
        for step in range(self.cfg.train_steps):
            x, y = make_images(self.cfg.batch_size, self.cfg)
            loss = self.train_step(x, y)
        xv, yv = make_images(64, self.cfg)
        print(f"source training done: loss {loss:.3f}, source acc {self.evaluate(xv, yv):.3f}")
        return {k: v.clone() for k, v in self.model.state_dict().items()}


# ------------------------------------------------------------------ cog-style API
@dataclass
class Input:
    description: str = ''
    default: object = None


class BasePredictor:
    def setup(self):
        pass

    def predict(self, **kwargs):
        raise NotImplementedError


class Predictor(BasePredictor):
    def __init__(self, cfg, weights):
        self.cfg = cfg
        self.weights = weights

    def setup(self):
        model = BNConvNet(self.cfg.num_classes)
        model.load_state_dict(self.weights)
        model = configure_model(model)
        params, _ = collect_params(model)
        optimizer = torch.optim.Adam(params, lr=self.cfg.tent_lr, betas=(0.9, 0.999))
        self.tent = Tent(model, optimizer, steps=self.cfg.tent_steps, episodic=self.cfg.episodic)

    def predict(self, images: torch.Tensor = Input(description="batch of target-domain images"),
                return_probs: bool = Input(description="return class probabilities", default=False)):
        outputs = self.tent(images)
        if return_probs:
            return outputs.softmax(1)
        return outputs.argmax(1)


def serve(predictor, cfg, generator):
    predictor.setup()
    accs = []
    for _ in range(cfg.requests):
        x, y = make_images(cfg.batch_size, cfg, shift=True, generator=generator)
        pred = predictor.predict(images=x, return_probs=False)
        accs.append((pred == y).float().mean().item())
    return float(np.mean(accs))


def main():
    set_seed(CFG.seed)
    weights = SourceTrainer(CFG).fit()
    acc = serve(Predictor(CFG, weights), CFG, torch.Generator().manual_seed(11))
    print(f"target accuracy with TENT: {acc:.3f}")


if __name__ == '__main__':
    main()
