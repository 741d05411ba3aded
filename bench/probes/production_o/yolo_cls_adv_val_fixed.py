# expect: clean
# source: https://github.com/ultralytics/yolov5/issues/12808
"""YOLOv5 classification with PGD adversarial training / adversarial testing.

classify/train.py trains on PGD examples (advertorch LinfPGDAttack) and at the
end of every epoch calls classify/val.py ``run`` with the same attacker, as in
the issue ("clean-train and adv-train are OK under train.py ... adv-test is
not").  The attack code mirrors advertorch.attacks.iterative_projected_gradient.
"""
from copy import deepcopy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)


# ------------------------------------------------------------ utils/general.py, utils/torch_utils.py
def check_version(current='0.0.0', minimum='0.0.0'):
    def parse(v):
        return tuple(int(x) for x in v.split('+')[0].split('.')[:2])
    return parse(current) >= parse(minimum)


def smart_inference_mode(torch_1_9=check_version(torch.__version__, '1.9.0')):
    # Applies torch.inference_mode() decorator if torch>=1.9.0 else torch.no_grad() decorator
    def decorate(fn):
        return (torch.inference_mode if torch_1_9 else torch.no_grad)()(fn)

    return decorate


class ModelEMA:
    def __init__(self, model, decay=0.9999, updates=0):
        self.ema = deepcopy(model).eval()
        self.updates = updates
        self.decay = lambda x: decay * (1 - np.exp(-x / 2000))
        for p in self.ema.parameters():
            p.requires_grad_(False)

    def update(self, model):
        self.updates += 1
        d = self.decay(self.updates)
        msd = model.state_dict()
        for k, v in self.ema.state_dict().items():
            if v.dtype.is_floating_point:
                v *= d
                v += (1 - d) * msd[k].detach()


# ------------------------------------------------------------ advertorch (attacks/utils.py, iterative_projected_gradient.py)
def clamp(input, min=None, max=None):
    return torch.clamp(input, min=min, max=max)


def batch_multiply(float_or_vector, tensor):
    return float_or_vector * tensor


def batch_clamp(float_or_vector, tensor):
    return torch.max(torch.min(tensor, torch.tensor(float_or_vector)), -torch.tensor(float_or_vector))


def rand_init_delta(delta, x, ord, eps, clip_min, clip_max):
    delta.data.uniform_(-1, 1)
    delta.data = batch_multiply(eps, delta.data)
    delta.data = clamp(x + delta.data, min=clip_min, max=clip_max) - x
    return delta.data


def perturb_iterative(xvar, yvar, predict, nb_iter, eps, eps_iter, loss_fn,
                      delta_init=None, minimize=False, clip_min=0.0, clip_max=1.0):
    """Iteratively maximize the loss over the input (L-inf PGD)."""
    if delta_init is not None:
        delta = delta_init
    else:
        delta = torch.zeros_like(xvar)

    delta.requires_grad_()
    for ii in range(nb_iter):
        outputs = predict(xvar + delta)
        loss = loss_fn(outputs, yvar)
        if minimize:
            loss = -loss

        loss.backward()
        grad_sign = delta.grad.data.sign()
        delta.data = delta.data + batch_multiply(eps_iter, grad_sign)
        delta.data = batch_clamp(eps, delta.data)
        delta.data = clamp(xvar.data + delta.data, clip_min, clip_max) - xvar.data
        delta.grad.data.zero_()

    x_adv = clamp(xvar + delta, clip_min, clip_max)
    return x_adv


class LinfPGDAttack:
    def __init__(self, predict, loss_fn=None, eps=0.3, nb_iter=40, eps_iter=0.01,
                 rand_init=True, clip_min=0., clip_max=1., targeted=False):
        self.predict = predict
        self.loss_fn = loss_fn if loss_fn is not None else nn.CrossEntropyLoss(reduction="sum")
        self.eps, self.nb_iter, self.eps_iter = eps, nb_iter, eps_iter
        self.rand_init = rand_init
        self.clip_min, self.clip_max = clip_min, clip_max
        self.targeted = targeted

    def perturb(self, x, y=None):
        delta = torch.zeros_like(x)
        delta = nn.Parameter(delta)
        if self.rand_init:
            rand_init_delta(delta, x, np.inf, self.eps, self.clip_min, self.clip_max)
            delta.data = clamp(x + delta.data, min=self.clip_min, max=self.clip_max) - x

        rval = perturb_iterative(x, y, self.predict, nb_iter=self.nb_iter, eps=self.eps,
                                 eps_iter=self.eps_iter, loss_fn=self.loss_fn,
                                 minimize=self.targeted, clip_min=self.clip_min,
                                 clip_max=self.clip_max, delta_init=delta)
        return rval.data


# ------------------------------------------------------------ models/yolo.py ClassificationModel (tiny)
class ClassificationModel(nn.Module):
    def __init__(self, nc=4, ch=3, width=8):
        super().__init__()
        self.model = nn.Sequential(
            nn.Conv2d(ch, width, 3, 2, 1), nn.BatchNorm2d(width), nn.SiLU(),
            nn.Conv2d(width, width * 2, 3, 2, 1), nn.BatchNorm2d(width * 2), nn.SiLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width * 2, nc))
        self.names = {i: n for i, n in enumerate(['Bird', 'UAV', 'airliner', 'helicopter'][:nc])}

    def forward(self, x):
        return self.model(x)


def make_loader(n_batches, batch_size, imgsz, nc, seed):
    g = torch.Generator().manual_seed(seed)
    return [(torch.rand(batch_size, 3, imgsz, imgsz, generator=g),
             torch.randint(0, nc, (batch_size,), generator=g)) for _ in range(n_batches)]


# ------------------------------------------------------------ classify/val.py
@smart_inference_mode(torch_1_9=False)
def run(data=None, weights=None, batch_size=8, imgsz=32, device='cpu', model=None,
        dataloader=None, criterion=None, attacker=None, verbose=False):
    model.eval()
    pred, targets, loss = [], [], 0
    n = len(dataloader)
    for images, labels in dataloader:
        images = images.to(device, non_blocking=True)
        labels = labels.to(device)
        if attacker is not None:
            with torch.enable_grad():
                img_adv = attacker.perturb(images, labels.to(device))
            images = img_adv
        y = model(images)
        pred.append(y.argsort(1, descending=True)[:, :5])
        targets.append(labels)
        if criterion:
            loss += criterion(y, labels)

    loss /= n
    pred, targets = torch.cat(pred), torch.cat(targets)
    correct = (targets[:, None] == pred).float()
    acc = torch.stack((correct[:, 0], correct.max(1).values), dim=1)  # (top1, top5) accuracy
    top1, top5 = acc.mean(0).tolist()
    if verbose:
        print(f"{'all':>24}{targets.shape[0]:>12}{top1:>12.3g}{top5:>12.3g}")
    return top1, top5, loss


# ------------------------------------------------------------ classify/train.py
def train(opt):
    model = ClassificationModel(nc=opt.nc)
    ema = ModelEMA(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=opt.lr0)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    trainloader = make_loader(3, opt.batch_size, opt.imgsz, opt.nc, seed=1)
    testloader = make_loader(2, opt.batch_size, opt.imgsz, opt.nc, seed=2)
    attacker1 = LinfPGDAttack(model, loss_fn=nn.CrossEntropyLoss(reduction="sum"), eps=5 / 255,
                              eps_iter=2 / 255, nb_iter=3, rand_init=True, clip_min=0.0,
                              clip_max=1.0, targeted=False)
    best_fitness = 0.0
    for epoch in range(opt.epochs):
        tloss = 0.0
        model.train()
        for i, (images, labels) in enumerate(trainloader):
            model.eval()
            images = attacker1.perturb(images, labels)
            model.train()
            loss = criterion(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            ema.update(model)
            tloss = (tloss * i + loss.item()) / (i + 1)
        attacker_val = LinfPGDAttack(ema.ema, loss_fn=None, eps=8 / 255, eps_iter=2 / 255,
                                     nb_iter=3, rand_init=True, clip_min=0.0, clip_max=1.0)
        top1, top5, vloss = run(model=ema.ema, dataloader=testloader, criterion=criterion,
                                attacker=attacker_val, verbose=True)
        best_fitness = max(best_fitness, top1)
        print(f"epoch {epoch}: train_loss {tloss:.4f} val_loss {float(vloss):.4f} top1 {top1:.3f}")


class Opt:
    epochs = 2
    batch_size = 8
    imgsz = 32
    nc = 4
    lr0 = 1e-3


train(Opt())
