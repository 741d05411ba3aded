# expect: grad_unused
# source: https://github.com/YiZeng623/I-BAU/issues/2
"""I-BAU: implicit backdoor adversarial unlearning of a poisoned classifier.

The defence alternates between (1) finding a universal adversarial perturbation
that maximises the loss of the (possibly backdoored) model on a small clean
unlearning set, and (2) updating the model so that it is robust to that
perturbation.  The outer update uses the implicit hypergradient of the minimax
problem, computed with a fixed-point iteration (hypergrad module adapted from
hypertorch).  Synthetic CIFAR-like data and a BadNets-style corner trigger.
"""
import logging
import random
from argparse import ArgumentParser
from itertools import repeat
from typing import Callable, List

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor
from torch.autograd import grad as torch_grad
from torch.utils.data import DataLoader, TensorDataset

# ----------------------------------------------------------------------------
# hypergrad (fixed-point hypergradient)
# ----------------------------------------------------------------------------


class DifferentiableOptimizer:
    def __init__(self, loss_f, dim_mult, data_or_iter=None):
        self.data_iterator = None
        if data_or_iter:
            self.data_iterator = data_or_iter if hasattr(data_or_iter, "__next__") else repeat(data_or_iter)
        self.loss_f = loss_f
        self.dim_mult = dim_mult
        self.curr_loss = None

    def step(self, params, hparams, create_graph):
        raise NotImplementedError

    def __call__(self, params, hparams, create_graph=True):
        with torch.enable_grad():
            return self.step(params, hparams, create_graph)

    def get_loss(self, params, hparams):
        if self.data_iterator:
            data = next(self.data_iterator)
            self.curr_loss = self.loss_f(params, hparams, data)
        else:
            self.curr_loss = self.loss_f(params, hparams)
        return self.curr_loss


class GradientDescent(DifferentiableOptimizer):
    def __init__(self, loss_f, step_size, data_or_iter=None):
        super().__init__(loss_f, dim_mult=1, data_or_iter=data_or_iter)
        self.step_size_f = step_size if callable(step_size) else lambda x: step_size

    def step(self, params, hparams, create_graph):
        loss = self.get_loss(params, hparams)
        sz = self.step_size_f(hparams)
        return gd_step(params, loss, sz, create_graph=create_graph)


def gd_step(params, loss, step_size, create_graph=True):
    grads = torch.autograd.grad(loss, params, create_graph=create_graph)  # raises
    return [w - step_size * g for w, g in zip(params, grads)]


def grad_unused_zero(output, inputs, grad_outputs=None, retain_graph=False, create_graph=False):
    grads = torch.autograd.grad(output, inputs, grad_outputs=grad_outputs, allow_unused=True,
                                retain_graph=retain_graph, create_graph=create_graph)
    return tuple(torch.zeros_like(v) if g is None else g for g, v in zip(grads, inputs))


def get_outer_gradients(outer_loss, params, hparams, retain_graph=True):
    grad_outer_w = grad_unused_zero(outer_loss, params, retain_graph=retain_graph)
    grad_outer_hparams = grad_unused_zero(outer_loss, hparams, retain_graph=retain_graph)
    return grad_outer_w, grad_outer_hparams


def update_tensor_grads(hparams, grads):
    for l, g in zip(hparams, grads):
        if l.grad is None:
            l.grad = torch.zeros_like(l)
        if g is not None:
            l.grad += g


def cat_list_to_tensor(list_tx):
    return torch.cat([xx.reshape([-1]) for xx in list_tx])


def fixed_point(params: List[Tensor], hparams: List[Tensor], K: int,
                fp_map: Callable, outer_loss: Callable, tol=1e-10, set_grad=True) -> List[Tensor]:
    params = [w.detach().requires_grad_(True) for w in params]
    o_loss = outer_loss(params, hparams)
    grad_outer_w, grad_outer_hparams = get_outer_gradients(o_loss, params, hparams)

    w_mapped = fp_map(params, hparams)
    vs = [torch.zeros_like(w) for w in params]
    vs_vec = cat_list_to_tensor(vs)
    for _ in range(K):
        vs_prev_vec = vs_vec
        vs = torch_grad(w_mapped, params, grad_outputs=vs, retain_graph=True)
        vs = [v + gow for v, gow in zip(vs, grad_outer_w)]
        vs_vec = cat_list_to_tensor(vs)
        if float(torch.norm(vs_vec - vs_prev_vec)) < tol:
            break

    grads = torch_grad(w_mapped, hparams, grad_outputs=vs, allow_unused=True)
    grads = [g + v if g is not None else v for g, v in zip(grads, grad_outer_hparams)]
    if set_grad:
        update_tensor_grads(hparams, grads)
    return grads


# ----------------------------------------------------------------------------
# model / data
# ----------------------------------------------------------------------------

DATASETS = {"mnist": dict(channels=1, size=14, classes=10),
            "cifar10": dict(channels=3, size=16, classes=10)}


class SmallVGG(nn.Module):
    def __init__(self, in_ch, num_classes, width=16):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_ch, width, 3, padding=1), nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
        )
        self.classifier = nn.Linear(8 * width, num_classes)

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))


def add_badnets_trigger(x, y, target_lab):
    x = x.clone()
    x[:, :, -3:, -3:] = 1.0
    return x, torch.full_like(y, target_lab)


def get_eval_data(args):
    spec = DATASETS[args.dataset]
    g = torch.Generator().manual_seed(args.seed)
    n = args.n_test
    x = torch.rand(n, spec["channels"], spec["size"], spec["size"], generator=g)
    y = torch.randint(0, spec["classes"], (n,), generator=g)
    x_poi, y_poi = add_badnets_trigger(x, y, args.target_lab)
    half = n // 2
    test_set = TensorDataset(x[half:], y[half:])
    att_val_set = TensorDataset(x_poi[:half], y_poi[:half])
    unl_set = TensorDataset(x[:args.n_unlearn], y[:args.n_unlearn])
    return test_set, att_val_set, unl_set


def get_results(model, criterion, data_loader):
    model.eval()
    correct, total = 0, 0
    with torch.no_grad():
        for inputs, targets in data_loader:
            outputs = model(inputs)
            _ = criterion(outputs, targets.long())
            correct += outputs.argmax(1).eq(targets).sum().item()
            total += targets.size(0)
    return correct / total


# ----------------------------------------------------------------------------
# defence
# ----------------------------------------------------------------------------


class IBAUDefense:
    def __init__(self, model, unl_set, args, logger):
        self.model = model
        self.args = args
        self.logger = logger
        self.unlloader = DataLoader(unl_set, batch_size=args.batch_size, shuffle=False)
        self.images_list, self.labels_list = [], []
        for images, labels in self.unlloader:
            self.images_list.append(images)
            self.labels_list.append(labels)
        self.batchnum = 0
        if args.optim == "SGD":
            self.outer_opt = torch.optim.SGD(model.parameters(), lr=args.lr)
        else:
            self.outer_opt = torch.optim.Adam(model.parameters(), lr=args.lr)
        self.inner_opt = GradientDescent(self.loss_inner, 0.1)

    # inner loss L2: maximise the loss of the model under the perturbation
    def loss_inner(self, perturb, model_params):
        images = self.images_list[0]
        labels = self.labels_list[0].long()
        per_img = images + perturb[0]
        per_logits = self.model(per_img)
        loss = F.cross_entropy(per_logits, labels, reduction="none")
        return torch.mean(-loss) + 0.001 * torch.pow(torch.norm(perturb[0]), 2)

    # outer loss L1: the model should stay correct on perturbed samples
    def loss_outer(self, perturb, model_params):
        images = self.images_list[self.batchnum]
        labels = self.labels_list[self.batchnum].long()
        patching = torch.zeros_like(images)
        number = images.shape[0]
        rand_idx = random.sample(list(np.arange(number)), int(number * self.args.portion))
        patching[rand_idx] = perturb[0]
        logits = self.model(images + patching)
        return F.cross_entropy(logits, labels)

    def init_perturbation(self):
        return torch.zeros_like(self.images_list[0][0], requires_grad=True)

    def find_perturbation(self):
        batch_pert = self.init_perturbation()
        batch_opt = torch.optim.SGD(params=[batch_pert], lr=10)
        for images, _ in self.unlloader:
            ori_lab = torch.argmax(self.model(images), axis=1).long()
            per_logits = self.model(images + batch_pert)
            loss = F.cross_entropy(per_logits, ori_lab, reduction="mean")
            loss_regu = torch.mean(-loss) + 0.001 * torch.pow(torch.norm(batch_pert), 2)
            batch_opt.zero_grad()
            loss_regu.backward(retain_graph=True)
            batch_opt.step()
        # l2-ball
        return batch_pert * min(1, self.args.pert_radius / (torch.norm(batch_pert).item() + 1e-12))

    def unlearn_round(self):
        pert = self.find_perturbation()
        for self.batchnum in range(len(self.images_list)):
            self.outer_opt.zero_grad()
            fixed_point(pert, list(self.model.parameters()), self.args.K, self.inner_opt, self.loss_outer)
            self.outer_opt.step()


def parse_args(argv=None):
    parser = ArgumentParser(description="I-BAU defense")
    parser.add_argument("--dataset", default="cifar10", choices=sorted(DATASETS))
    parser.add_argument("--batch_size", type=int, default=40)
    parser.add_argument("--optim", type=str, default="Adam")
    parser.add_argument("--lr", default=0.001, type=float)
    parser.add_argument("--n_rounds", default=2, type=int)
    parser.add_argument("--K", default=3, type=int)
    parser.add_argument("--portion", default=0.05, type=float)
    parser.add_argument("--pert_radius", default=10.0, type=float)
    parser.add_argument("--target_lab", default=8, type=int)
    parser.add_argument("--n_test", default=240, type=int)
    parser.add_argument("--n_unlearn", default=120, type=int)
    parser.add_argument("--seed", default=0, type=int)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s %(levelname)s] %(message)s")
    logger = logging.getLogger("main-logger")
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    np.random.seed(args.seed)

    test_set, att_val_set, unl_set = get_eval_data(args)
    clnloader = DataLoader(test_set, batch_size=60, shuffle=False)
    poiloader = DataLoader(att_val_set, batch_size=60, shuffle=False)

    spec = DATASETS[args.dataset]
    model = SmallVGG(spec["channels"], spec["classes"])
    criterion = nn.CrossEntropyLoss()
    logger.info("Original ACC: %.3f ASR: %.3f", get_results(model, criterion, clnloader),
                get_results(model, criterion, poiloader))

    defense = IBAUDefense(model, unl_set, args, logger)
    model.eval()
    for rnd in range(args.n_rounds):
        defense.unlearn_round()
        acc = get_results(model, criterion, clnloader)
        asr = get_results(model, criterion, poiloader)
        logger.info("Round %d ACC: %.3f ASR: %.3f", rnd, acc, asr)


if __name__ == "__main__":
    main([])
