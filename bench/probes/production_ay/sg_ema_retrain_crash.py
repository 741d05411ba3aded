# expect: no_grad_fn
# source: https://github.com/Deci-AI/super-gradients/pull/25
"""SuperGradients-style `SgModel` training loop with an EMA copy of the network.

`SgModel` keeps the network in `self.net`, builds an optimizer with separate zero-weight-decay
param groups, a warmup + cosine LR callback, a `ModelEMA` (YOLOv5-style, frozen deepcopy
updated after every optimizer step), per-epoch validation on the EMA weights, and a `test()`
entry point. `main()` runs a short pre-training phase, evaluates, then a fine-tuning phase
with a lower learning rate, as a recipe would. CPU, synthetic 10-class images.
"""
import math
from copy import deepcopy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


DEFAULT_TRAINING_PARAMS = {
    "max_epochs": 2, "initial_lr": 0.1, "lr_warmup_epochs": 1, "lr_mode": "cosine", "cosine_final_lr_ratio": 0.01,
    "optimizer": "SGD", "optimizer_params": {"weight_decay": 5e-4, "momentum": 0.9}, "zero_weight_decay_on_bias_and_bn": True,
    "ema": False, "ema_params": {"decay": 0.9999, "beta": 15}, "loss": "cross_entropy", "run_validation_freq": 1,
    "silent_mode": False,
}


class HpmStruct:
    def __init__(self, **entries):
        self.__dict__.update(entries)

    def override(self, **entries):
        self.__dict__.update(entries)
        return self


# ----------------------------------------------------------------------------- network
class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNetTiny(nn.Module):
    def __init__(self, num_classes=10, width=8):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.layer1 = BasicBlock(width, width)
        self.layer2 = BasicBlock(width, width * 2, stride=2)
        self.linear = nn.Linear(width * 2, num_classes)

    def forward(self, x):
        out = self.layer2(self.layer1(self.stem(x)))
        return self.linear(F.adaptive_avg_pool2d(out, 1).flatten(1))


# ----------------------------------------------------------------------------- EMA
class ModelEMA:
    """ Model Exponential Moving Average; keeps a moving average of everything in the model state_dict """

    def __init__(self, model, decay=0.9999, beta=15):
        self.ema = deepcopy(model)
        self.ema.eval()
        self.updates = 0
        self.decay_function = lambda x: decay * (1 - math.exp(-x * beta))
        for p in self.ema.parameters():
            p.requires_grad_(False)

    def update(self, model, training_percent):
        with torch.no_grad():
            self.updates += 1
            d = self.decay_function(training_percent)
            msd = model.state_dict()
            for k, v in self.ema.state_dict().items():
                if v.dtype.is_floating_point:
                    v *= d
                    v += (1.0 - d) * msd[k].detach()

    def update_attr(self, model):
        for k, v in model.__dict__.items():
            if not k.startswith("_") and k != "training":
                setattr(self.ema, k, v)


# ----------------------------------------------------------------------------- callbacks / utils
class LRCallback:
    def __init__(self, initial_lr, max_epochs, warmup_epochs, iters_per_epoch, final_lr_ratio):
        self.initial_lr, self.max_epochs, self.warmup_epochs = initial_lr, max_epochs, warmup_epochs
        self.iters_per_epoch, self.final_lr_ratio = iters_per_epoch, final_lr_ratio

    def __call__(self, optimizer, epoch, batch_idx):
        if epoch < self.warmup_epochs:
            lr = self.initial_lr * (epoch * self.iters_per_epoch + batch_idx + 1) / (self.warmup_epochs * self.iters_per_epoch)
        else:
            progress = (epoch - self.warmup_epochs) / max(1, self.max_epochs - self.warmup_epochs)
            lr = self.initial_lr * (self.final_lr_ratio + (1 - self.final_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))
        for group in optimizer.param_groups:
            group["lr"] = lr
        return lr


def separate_zero_wd_params_groups_for_optimizer(module, weight_decay):
    decay, no_decay = [], []
    for name, p in module.named_parameters():
        (no_decay if p.ndim <= 1 or name.endswith(".bias") else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def build_optimizer(net, lr, training_params):
    opt_params = dict(training_params.optimizer_params)
    if training_params.zero_weight_decay_on_bias_and_bn:
        params = separate_zero_wd_params_groups_for_optimizer(net, opt_params.pop("weight_decay"))
    else:
        params = net.parameters()
    opt_cls = {"SGD": torch.optim.SGD, "Adam": torch.optim.Adam}[training_params.optimizer]
    return opt_cls(params, lr=lr, **opt_params)


def accuracy(output, target):
    return float((output.argmax(1) == target).float().mean())


class AverageMeter:
    def __init__(self):
        self.sum, self.count = 0.0, 0

    def update(self, value, n=1):
        self.sum += value * n
        self.count += n

    @property
    def average(self):
        return self.sum / max(self.count, 1)


# ----------------------------------------------------------------------------- SgModel
class SgModel:
    def __init__(self, experiment_name, train_loader, valid_loader, test_loader=None):
        self.experiment_name = experiment_name
        self.train_loader, self.valid_loader = train_loader, valid_loader
        self.test_loader = test_loader if test_loader is not None else valid_loader
        self.net, self.ema, self.ema_model = None, False, None
        self.best_metric = -np.inf

    def build_model(self, architecture, arch_params):
        self.arch_params = HpmStruct(**arch_params)
        self.net = architecture(**arch_params)

    def _backward_step(self, loss, epoch, batch_idx, context):
        loss.backward()  # raises
        self.optimizer.step()
        self.optimizer.zero_grad()
        if self.ema:
            self.ema_model.update(self.net, training_percent=(epoch + batch_idx / len(self.train_loader)) / self.max_epochs)

    def _train_epoch(self, epoch, silent_mode):
        self.net.train()
        loss_meter, acc_meter = AverageMeter(), AverageMeter()
        for batch_idx, (inputs, targets) in enumerate(self.train_loader):
            lr = self.lr_callback(self.optimizer, epoch, batch_idx)
            outputs = self.net(inputs)
            loss = self.criterion(outputs, targets)
            self._backward_step(loss, epoch, batch_idx, context={"lr": lr})
            loss_meter.update(loss.item(), inputs.size(0))
            acc_meter.update(accuracy(outputs.detach(), targets), inputs.size(0))
        if not silent_mode:
            print("[{}] epoch {} train loss {:.4f} acc {:.3f} lr {:.4f}".format(
                self.experiment_name, epoch, loss_meter.average, acc_meter.average, lr))
        return loss_meter.average

    @torch.no_grad()
    def _validate_epoch(self, loader=None):
        self.net.eval()
        acc_meter = AverageMeter()
        for inputs, targets in (loader or self.valid_loader):
            acc_meter.update(accuracy(self.net(inputs), targets), inputs.size(0))
        return acc_meter.average

    def train(self, training_params=None):
        training_params = HpmStruct(**deepcopy(DEFAULT_TRAINING_PARAMS)).override(**(training_params or {}))
        self.training_params = training_params
        self.max_epochs = training_params.max_epochs
        self.criterion = {"cross_entropy": nn.CrossEntropyLoss()}[training_params.loss]
        self.optimizer = build_optimizer(self.net, training_params.initial_lr, training_params)
        self.lr_callback = LRCallback(training_params.initial_lr, self.max_epochs, training_params.lr_warmup_epochs,
                                      len(self.train_loader), training_params.cosine_final_lr_ratio)
        self.ema = training_params.ema
        if self.ema:
            self.ema_model = ModelEMA(self.net, **training_params.ema_params)

        for epoch in range(self.max_epochs):
            self._train_epoch(epoch, training_params.silent_mode)
            # model switch - we replace self.net with the ema model for the testing and saving part
            # and then switch it back before the next training epoch
            if self.ema:
                self.ema_model.update_attr(self.net)
                keep_model = self.net
                self.net = self.ema_model.ema
            if (epoch + 1) % training_params.run_validation_freq == 0:
                valid_acc = self._validate_epoch()
                self.best_metric = max(self.best_metric, valid_acc)
                print("[{}] epoch {} valid acc {:.3f} (best {:.3f})".format(self.experiment_name, epoch, valid_acc, self.best_metric))
            if self.ema:
                self.net = keep_model

        if self.ema:
            self.net = self.ema_model.ema

    def test(self, test_loader=None):
        return self._validate_epoch(test_loader or self.test_loader)


# ----------------------------------------------------------------------------- data / main
def make_loader(n, batch_size, seed):
    g = torch.Generator().manual_seed(seed)
    targets = torch.randint(0, 10, (n,), generator=g)
    protos = torch.randn(10, 3, 8, 8, generator=torch.Generator().manual_seed(123))
    inputs = protos[targets] + 0.5 * torch.randn(n, 3, 8, 8, generator=g)
    return [(inputs[i:i + batch_size], targets[i:i + batch_size]) for i in range(0, n, batch_size)]


def main():
    torch.manual_seed(0)
    train_loader, valid_loader = make_loader(64, 16, seed=1), make_loader(32, 16, seed=2)
    model = SgModel("resnet_tiny_cifar", train_loader, valid_loader)
    model.build_model(ResNetTiny, {"num_classes": 10, "width": 8})

    # phase 1: pre-training with EMA
    model.train({"max_epochs": 2, "initial_lr": 0.1, "ema": True, "ema_params": {"decay": 0.99, "beta": 15}})
    print("phase 1 test acc: {:.3f}".format(model.test()))

    # phase 2: fine-tuning recipe, lower lr, no warmup
    model.train({"max_epochs": 2, "initial_lr": 0.01, "lr_warmup_epochs": 0, "ema": True,
                 "ema_params": {"decay": 0.99, "beta": 15}})
    print("phase 2 test acc: {:.3f}".format(model.test()))


if __name__ == "__main__":
    main()
