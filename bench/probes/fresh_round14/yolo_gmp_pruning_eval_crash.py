# expect: requires_grad_nonleaf
# source: https://github.com/neuralmagic/sparseml/issues/316
"""Sparse-training integration for a tiny YOLO-style detector: a recipe-driven
gradual-magnitude-pruning (GMP) modifier masks conv weights during training,
then the test routine (test.py style) freezes the model and computes a
simple objectness/box metric on a synthetic validation set."""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Recipe:
    start_epoch: int = 0
    end_epoch: int = 2
    init_sparsity: float = 0.05
    final_sparsity: float = 0.6
    update_frequency: int = 1
    params: tuple = ("backbone.1.conv.weight", "backbone.2.conv.weight", "head.weight")


@dataclass
class Hyp:
    epochs: int = 3
    batch_size: int = 4
    img: int = 32
    nc: int = 3
    lr0: float = 0.01
    momentum: float = 0.937
    iters: int = 2


class Conv(nn.Module):
    def __init__(self, c1, c2, k=3, s=1):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, k // 2, bias=False)
        self.bn = nn.BatchNorm2d(c2)

    def forward(self, x):
        return F.silu(self.bn(self.conv(x)))


class TinyYOLO(nn.Module):
    def __init__(self, nc=3, na=3):
        super().__init__()
        self.nc, self.na = nc, na
        self.backbone = nn.Sequential(Conv(3, 8, 3, 2), Conv(8, 16, 3, 2), Conv(16, 32, 3, 2))
        self.head = nn.Conv2d(32, na * (5 + nc), 1)

    def forward(self, x):
        p = self.head(self.backbone(x))
        b, _, ny, nx = p.shape
        return p.view(b, self.na, 5 + self.nc, ny, nx).permute(0, 1, 3, 4, 2)


class GMPruningModifier:
    """applies magnitude masks to selected weights; masked weight = weight_orig * mask"""

    def __init__(self, recipe: Recipe):
        self.recipe = recipe
        self.targets = []

    def initialize(self, model):
        for name in self.recipe.params:
            mod_name, pname = name.rsplit(".", 1)
            module = model.get_submodule(mod_name)
            orig = getattr(module, pname)
            module.register_parameter(pname + "_orig", nn.Parameter(orig.data.clone()))
            module.register_buffer(pname + "_mask", torch.ones_like(orig))
            self.targets.append((module, pname))
        self.apply_masks()

    def sparsity_at(self, epoch):
        r = self.recipe
        if epoch < r.start_epoch:
            return 0.0
        t = min(1.0, (epoch - r.start_epoch) / max(r.end_epoch - r.start_epoch, 1))
        return r.final_sparsity + (r.init_sparsity - r.final_sparsity) * (1 - t) ** 3

    def update_masks(self, epoch):
        s = self.sparsity_at(epoch)
        for module, pname in self.targets:
            w = getattr(module, pname + "_orig").detach().abs().flatten()
            k = int(math.floor(s * w.numel()))
            if k == 0:
                continue
            thr = w.kthvalue(k).values
            getattr(module, pname + "_mask").copy_((getattr(module, pname + "_orig").abs() > thr).float())
        return s

    def apply_masks(self):
        for module, pname in self.targets:
            module._parameters[pname] = getattr(module, pname + "_orig") * getattr(module, pname + "_mask")

    def finalize(self):
        for module, pname in self.targets:
            masked = (getattr(module, pname + "_orig") * getattr(module, pname + "_mask")).detach()
            module._parameters[pname] = nn.Parameter(masked)


def compute_loss(pred, targets):
    obj = pred[..., 4]
    lobj = F.binary_cross_entropy_with_logits(obj, targets["obj"])
    lbox = F.smooth_l1_loss(pred[..., :4].sigmoid(), targets["box"])
    lcls = F.cross_entropy(pred[..., 5:].reshape(-1, pred.shape[-1] - 5), targets["cls"].reshape(-1))
    return lobj + 0.05 * lbox + 0.5 * lcls


def synthetic(hyp, g, na=3):
    imgs = torch.rand(hyp.batch_size, 3, hyp.img, hyp.img, generator=g)
    s = hyp.img // 8
    return imgs, {
        "obj": (torch.rand(hyp.batch_size, na, s, s, generator=g) > 0.8).float(),
        "box": torch.rand(hyp.batch_size, na, s, s, 4, generator=g),
        "cls": torch.randint(0, hyp.nc, (hyp.batch_size, na, s, s), generator=g),
    }


def test(model, hyp, g):
    """test.py: evaluation in fp32 with gradients disabled on the model"""
    model.eval()
    for p in model.parameters():
        p.requires_grad = False  # raises
    hits, total = 0, 0
    with torch.no_grad():
        for _ in range(2):
            imgs, targets = synthetic(hyp, g)
            pred = model(imgs)
            hits += ((pred[..., 4].sigmoid() > 0.5).float() == targets["obj"]).sum().item()
            total += targets["obj"].numel()
    return hits / total


def train(hyp: Hyp, recipe: Recipe):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = TinyYOLO(nc=hyp.nc)
    manager = GMPruningModifier(recipe)
    manager.initialize(model)
    params = [p for n, p in model.named_parameters() if n.endswith("_orig") or n.rsplit(".", 1)[-1] not in
              {t.rsplit(".", 1)[-1] for t in recipe.params}]
    optimizer = torch.optim.SGD(params, lr=hyp.lr0, momentum=hyp.momentum, nesterov=True)
    for epoch in range(hyp.epochs):
        model.train()
        sparsity = manager.update_masks(epoch)
        for _ in range(hyp.iters):
            manager.apply_masks()
            imgs, targets = synthetic(hyp, g)
            loss = compute_loss(model(imgs), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} sparsity {sparsity:.2f} loss {loss.item():.4f}")
    manager.apply_masks()
    return model, manager


def main():
    hyp, recipe = Hyp(), Recipe()
    model, manager = train(hyp, recipe)
    g = torch.Generator().manual_seed(1)
    acc = test(model, hyp, g)
    print(f"objectness accuracy {acc:.3f}")


if __name__ == "__main__":
    main()
