# expect: clean
# source: https://github.com/PingoLH/FCHarDNet/issues/61
"""FC-HarDNet-style semantic segmentation: train a small harmonic-densely-connected
encoder/decoder on synthetic scenes, then prepare it for deployment by folding every
BatchNorm into the preceding convolution (as FCHarDNet's test.py does before timing
inference) and checking the fused network against the original on validation data.
"""
import copy
import random
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


cfg = SimpleNamespace(
    model=SimpleNamespace(n_classes=3, base=8, growth=6, n_layers=4),
    training=SimpleNamespace(iters=6, batch_size=4, lr=0.02, momentum=0.9, weight_decay=5e-4,
                             power=0.9, img_size=32),
    deploy=SimpleNamespace(fuse_bn=True, atol=1e-4),
    seed=1337,
)


class ConvLayer(nn.Sequential):
    def __init__(self, in_channels, out_channels, kernel=3, stride=1):
        super().__init__()
        self.add_module("conv", nn.Conv2d(in_channels, out_channels, kernel, stride, kernel // 2, bias=False))
        self.add_module("norm", nn.BatchNorm2d(out_channels))
        self.add_module("relu", nn.ReLU(inplace=True))


class HarDBlock(nn.Module):
    @staticmethod
    def get_link(layer, growth):
        link, k = [], 1
        while layer % k == 0 and k <= layer:
            link.append(layer - k)
            k *= 2
        return link

    def __init__(self, in_channels, growth, n_layers):
        super().__init__()
        self.links, layers, channels = [], [], [in_channels]
        for i in range(1, n_layers + 1):
            link = self.get_link(i, growth)
            self.links.append(link)
            layers.append(ConvLayer(sum(channels[j] for j in link), growth))
            channels.append(growth)
        self.layers = nn.ModuleList(layers)
        self.out_channels = sum(channels[i] for i in range(len(channels)) if i == 0 or i % 2 == 1 or i == n_layers)

    def forward(self, x):
        layers_ = [x]
        for link, layer in zip(self.links, self.layers):
            layers_.append(layer(torch.cat([layers_[j] for j in link], 1)))
        t = len(layers_)
        return torch.cat([layers_[i] for i in range(t) if i == 0 or i == t - 1 or i % 2 == 1], 1)


class FCHarDNet(nn.Module):
    def __init__(self, n_classes, base, growth, n_layers):
        super().__init__()
        self.stem = nn.Sequential(ConvLayer(3, base, stride=2), ConvLayer(base, 2 * base))
        self.block1 = HarDBlock(2 * base, growth, n_layers)
        self.down = ConvLayer(self.block1.out_channels, 2 * base, kernel=1)
        self.block2 = HarDBlock(2 * base, growth, n_layers)
        self.up_conv = ConvLayer(self.block2.out_channels + self.block1.out_channels, 2 * base, kernel=1)
        self.finalConv = nn.Conv2d(2 * base, n_classes, 1)

    def forward(self, x):
        size = x.shape[-2:]
        s = self.stem(x)
        b1 = self.block1(s)
        b2 = self.block2(F.avg_pool2d(self.down(b1), 2))
        up = F.interpolate(b2, size=b1.shape[-2:], mode="bilinear", align_corners=True)
        out = self.finalConv(self.up_conv(torch.cat([up, b1], 1)))
        return F.interpolate(out, size=size, mode="bilinear", align_corners=True)


def fuse_bn_recursively(model):
    for module_name in model._modules:
        model._modules[module_name] = fuse_bn_recursively(model._modules[module_name])
    if isinstance(model, ConvLayer) and "norm" in model._modules:
        conv, bn = model._modules["conv"], model._modules["norm"]
        std = torch.sqrt(bn.running_var + bn.eps)
        W = conv.weight * (bn.weight / std).view(-1, 1, 1, 1)
        b = bn.bias - bn.running_mean * bn.weight / std
        cconv = nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size,
                          conv.stride, conv.padding, bias=True)
        with torch.no_grad():
            cconv.weight[:, :, :, :] = W[:, :, :, :]
            cconv.bias[:] = b[:]
        model._modules["conv"] = cconv
        model._modules["norm"] = nn.Identity()
    return model


def make_batch(bs, size, gen):
    imgs, labels = torch.zeros(bs, 3, size, size), torch.zeros(bs, size, size, dtype=torch.long)
    yy, xx = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    for i in range(bs):
        for cls in (1, 2):
            cy, cx = torch.randint(6, size - 6, (2,), generator=gen)
            mask = ((yy - cy).abs() < 5) & ((xx - cx).abs() < 5)
            labels[i][mask] = cls
            imgs[i, cls][mask] = 1.0
    return imgs + 0.2 * torch.randn(imgs.shape, generator=gen), labels


class Trainer:
    def __init__(self, cfg):
        self.cfg = cfg
        m, t = cfg.model, cfg.training
        self.model = FCHarDNet(m.n_classes, m.base, m.growth, m.n_layers)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=t.lr, momentum=t.momentum,
                                         weight_decay=t.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda it: (1 - it / t.iters) ** t.power)
        self.gen = torch.Generator().manual_seed(cfg.seed)

    def train_step(self):
        t = self.cfg.training
        self.model.train()
        images, labels = make_batch(t.batch_size, t.img_size, self.gen)
        loss = F.cross_entropy(self.model(images), labels)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        return loss.item()

    @torch.no_grad()
    def evaluate(self, model, images, labels):
        model.eval()
        pred = model(images).argmax(1)
        ious = []
        for c in range(self.cfg.model.n_classes):
            inter = ((pred == c) & (labels == c)).sum().item()
            union = ((pred == c) | (labels == c)).sum().item()
            ious.append(inter / union if union else 1.0)
        return float(np.mean(ious))


def deploy(model, cfg):
    model = copy.deepcopy(model).eval()
    if cfg.deploy.fuse_bn:
        model = fuse_bn_recursively(model)
    return model


def main():
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    trainer = Trainer(cfg)
    for it in range(cfg.training.iters):
        print(f"iter {it}: loss {trainer.train_step():.4f}")
    val_x, val_y = make_batch(4, cfg.training.img_size, torch.Generator().manual_seed(99))
    print("val mIoU:", round(trainer.evaluate(trainer.model, val_x, val_y), 4))
    fused = deploy(trainer.model, cfg)
    with torch.no_grad():
        diff = (fused(val_x) - trainer.model.eval()(val_x)).abs().max().item()
    print("fused max abs diff:", diff, "ok" if diff < cfg.deploy.atol else "MISMATCH")
    print("fused val mIoU:", round(trainer.evaluate(fused, val_x, val_y), 4))


if __name__ == "__main__":
    main()
