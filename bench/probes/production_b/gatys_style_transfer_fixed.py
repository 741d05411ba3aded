# expect: clean
# source: https://github.com/PacktPublishing/Modern-Computer-Vision-with-PyTorch/issues/36
"""Gatys-style neural style transfer with an L-BFGS optimised image.

Feature maps are collected with forward hooks registered on a VGG-like
feature extractor; style is matched through Gram matrices and content
through a deeper activation.  Images are synthetic so the script runs
offline.
"""
import math
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]

settings = {
    "image_size": 32,
    "style_layers": ["conv1_1", "conv2_1", "conv3_1"],
    "content_layers": ["conv3_2"],
    "style_weights": [1000 / n ** 2 for n in (8, 16, 32)],
    "content_weights": [1.0],
    "lbfgs": {"lr": 1.0, "max_iter": 5, "history_size": 10},
    "outer_steps": 3,
    "show_every": 1,
}


class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, img):
        for t in self.transforms:
            img = t(img)
        return img


class Lambda:
    def __init__(self, lambd):
        self.lambd = lambd

    def __call__(self, img):
        return self.lambd(img)


class Normalize:
    def __init__(self, mean, std):
        self.mean = torch.tensor(mean).view(-1, 1, 1)
        self.std = torch.tensor(std).view(-1, 1, 1)

    def __call__(self, img):
        return (img - self.mean) / self.std


preprocess = Compose([
    Normalize(mean=IMAGENET_MEAN, std=IMAGENET_STD),
    Lambda(lambda x: x.mul_(255.)),
])
postprocess = Compose([
    Lambda(lambda x: x.mul(1. / 255)),
    Normalize(mean=[-m / s for m, s in zip(IMAGENET_MEAN, IMAGENET_STD)], std=[1 / s for s in IMAGENET_STD]),
])


def conv_relu(c_in, c_out):
    return [nn.Conv2d(c_in, c_out, 3, padding=1), nn.ReLU(inplace=False)]


class FeatureExtractor(nn.Module):
    """VGG-shaped conv stack; names follow the convX_Y convention."""

    CFG = [("conv1_1", 3, 8), ("conv1_2", 8, 8), "pool",
           ("conv2_1", 8, 16), ("conv2_2", 16, 16), "pool",
           ("conv3_1", 16, 32), ("conv3_2", 32, 32)]

    def __init__(self):
        super().__init__()
        layers = OrderedDict()
        pool_id = 0
        for item in self.CFG:
            if item == "pool":
                pool_id += 1
                layers[f"pool{pool_id}"] = nn.AvgPool2d(2)
                continue
            name, c_in, c_out = item
            conv, act = conv_relu(c_in, c_out)
            layers[name] = conv
            layers[name.replace("conv", "relu")] = act
        self.body = nn.Sequential(layers)
        self._store = {}
        self._handles = []

    def watch(self, names):
        for h in self._handles:
            h.remove()
        self._handles = []
        for name in names:
            relu = self.body._modules[name.replace("conv", "relu")]
            self._handles.append(relu.register_forward_hook(self._make_hook(name)))

    def _make_hook(self, name):
        def hook(module, inputs, output):
            self._store[name] = output
        return hook

    def forward(self, x, names):
        self._store = {}
        self.body(x)
        return [self._store[n] for n in names]


class GramMatrix(nn.Module):
    def forward(self, feat):
        b, c, h, w = feat.shape
        flat = feat.view(b, c, h * w)
        return torch.bmm(flat, flat.transpose(1, 2)).div_(h * w)


class GramMSELoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.gram = GramMatrix()

    def forward(self, feat, target):
        return F.mse_loss(self.gram(feat), target)


def synthetic_image(size, kind, seed):
    rng = np.random.RandomState(seed)
    yy, xx = np.mgrid[0:size, 0:size] / size
    if kind == "content":
        img = np.stack([np.sin(6 * xx), np.cos(4 * yy), xx * yy], 0)
    else:
        img = np.stack([np.sin(20 * (xx + yy)), np.sin(15 * xx) * np.cos(15 * yy), rng.rand(size, size)], 0)
    img = (img - img.min()) / (img.max() - img.min() + 1e-8)
    return torch.tensor(img, dtype=torch.float32)


def show(img, tag):
    arr = img.detach().clamp(0, 1).numpy()
    print(f"[{tag}] shape={tuple(arr.shape)} mean={arr.mean():.4f} std={arr.std():.4f}")


def main():
    torch.manual_seed(0)
    size = settings["image_size"]
    vgg = FeatureExtractor().eval()
    for p in vgg.parameters():
        p.requires_grad_(False)

    content = preprocess(synthetic_image(size, "content", 0))[None]
    style = preprocess(synthetic_image(size, "style", 1))[None]

    style_layers, content_layers = settings["style_layers"], settings["content_layers"]
    layers = style_layers + content_layers
    vgg.watch(layers)
    loss_fns = [GramMSELoss()] * len(style_layers) + [nn.MSELoss()] * len(content_layers)
    weights = settings["style_weights"] + settings["content_weights"]

    with torch.no_grad():
        style_targets = [GramMatrix()(f) for f in vgg(style, style_layers)]
        content_targets = vgg(content, content_layers)
    targets = style_targets + content_targets

    opt_img = content.data.clone()
    opt_img.requires_grad = True
    optimizer = torch.optim.LBFGS([opt_img], **settings["lbfgs"])
    iters = [0]

    def closure():
        optimizer.zero_grad()
        out = vgg(opt_img, layers)
        layer_losses = [weights[a] * loss_fns[a](A, targets[a]) for a, A in enumerate(out)]
        loss = sum(layer_losses)
        loss.backward()
        iters[0] += 1
        return loss

    for step in range(settings["outer_steps"]):
        loss = optimizer.step(closure)
        if step % settings["show_every"] == 0:
            print(f"step {step} evals {iters[0]} loss {loss.item():.4f}")
        if not math.isfinite(loss.item()):
            break

    out_img = postprocess(opt_img[0]).permute(1, 2, 0)
    show(out_img, "stylised")


if __name__ == "__main__":
    main()
