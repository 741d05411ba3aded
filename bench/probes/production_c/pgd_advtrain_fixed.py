# expect: clean
# source: https://github.com/BorealisAI/advertorch/issues/79
"""
Madry-style PGD adversarial training with a robust-accuracy evaluation pass.

The attack follows advertorch's perturb_iterative (L-inf PGD with a random
start); the trainer alternates adversarial training epochs with a test pass
that reports clean and robust accuracy.
"""
import argparse
import logging
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(asctime)s %(message)s")
logger = logging.getLogger(__name__)


def clamp(x, lo, hi):
    return torch.max(torch.min(x, hi), lo)


def batch_multiply(scalar, t):
    return scalar * t


def perturb_iterative(xvar, yvar, predict, nb_iter, eps, eps_iter, loss_fn,
                      delta_init=None, minimize=False, clip_min=0.0, clip_max=1.0):
    """Iteratively maximize the loss over the input (L-inf projected gradient)."""
    if delta_init is not None:
        delta = delta_init
    else:
        delta = torch.zeros_like(xvar)

    delta.requires_grad_()
    for _ in range(nb_iter):
        outputs = predict(xvar + delta)
        loss = loss_fn(outputs, yvar)
        if minimize:
            loss = -loss

        loss.backward()
        grad_sign = delta.grad.data.sign()
        delta.data = delta.data + batch_multiply(eps_iter, grad_sign)
        delta.data = clamp(delta.data, -eps * torch.ones_like(delta.data), eps * torch.ones_like(delta.data))
        delta.data = torch.clamp(xvar.data + delta.data, clip_min, clip_max) - xvar.data
        delta.grad.data.zero_()

    x_adv = torch.clamp(xvar + delta, clip_min, clip_max)
    return x_adv


class LinfPGDAttack:
    def __init__(self, predict, loss_fn=None, eps=0.3, nb_iter=40, eps_iter=0.01,
                 rand_init=True, clip_min=0.0, clip_max=1.0, targeted=False):
        self.predict = predict
        self.loss_fn = loss_fn or nn.CrossEntropyLoss(reduction="sum")
        self.eps = eps
        self.nb_iter = nb_iter
        self.eps_iter = eps_iter
        self.rand_init = rand_init
        self.clip_min = clip_min
        self.clip_max = clip_max
        self.targeted = targeted

    def perturb(self, x, y):
        delta = torch.zeros_like(x)
        if self.rand_init:
            delta.uniform_(-self.eps, self.eps)
            delta = torch.clamp(x + delta, self.clip_min, self.clip_max) - x
        rval = perturb_iterative(
            x, y, self.predict, nb_iter=self.nb_iter, eps=self.eps, eps_iter=self.eps_iter,
            loss_fn=self.loss_fn, minimize=self.targeted, delta_init=delta,
            clip_min=self.clip_min, clip_max=self.clip_max,
        )
        return rval.data


class LeNet5(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc1 = nn.Linear(16 * 3 * 3, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = x.flatten(1)
        return self.fc2(F.relu(self.fc1(x)))


def synthetic_loader(n_batches, batch_size, seed):
    g = torch.Generator().manual_seed(seed)
    for _ in range(n_batches):
        x = torch.rand(batch_size, 1, 12, 12, generator=g)
        y = torch.randint(0, 10, (batch_size,), generator=g)
        yield x, y


class AdvTrainer:
    def __init__(self, args):
        self.args = args
        self.model = LeNet5()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=args.lr)
        self.adversary = LinfPGDAttack(
            self.model, loss_fn=nn.CrossEntropyLoss(reduction="sum"), eps=args.eps,
            nb_iter=args.nb_iter, eps_iter=args.eps_iter, rand_init=True,
        )

    def train_epoch(self, epoch):
        self.model.train()
        for batch_idx, (data, target) in enumerate(synthetic_loader(self.args.train_batches, self.args.batch_size, epoch)):
            # when performing attack, the model needs to be in eval mode
            # also the parameters should NOT be accumulating gradients
            self.model.eval()
            adv_data = self.adversary.perturb(data, target)
            self.model.train()

            self.optimizer.zero_grad()
            output = self.model(adv_data)
            loss = F.cross_entropy(output, target, reduction="mean")
            loss.backward()
            self.optimizer.step()
            if batch_idx % self.args.log_interval == 0:
                logger.info("Train Epoch: %d [%d]\tLoss: %.6f", epoch, batch_idx, loss.item())

    def test(self):
        self.model.eval()
        clean_correct, adv_correct, total = 0, 0, 0
        for data, target in synthetic_loader(self.args.test_batches, self.args.test_batch_size, 999):
            with torch.no_grad():
                output = self.model(data)
            clean_correct += output.argmax(dim=1).eq(target).sum().item()

            # the attack needs autograd, so it must run outside of no_grad
            adv_untargeted = self.adversary.perturb(data, target)
            with torch.no_grad():
                output = self.model(adv_untargeted)
            adv_correct += output.argmax(dim=1).eq(target).sum().item()
            total += target.numel()
        logger.info("Test: clean acc %.3f  robust acc %.3f", clean_correct / total, adv_correct / total)
        return clean_correct / total, adv_correct / total


def get_args():
    parser = argparse.ArgumentParser(description="PGD adversarial training")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--test-batch-size", type=int, default=32)
    parser.add_argument("--train-batches", type=int, default=3)
    parser.add_argument("--test-batches", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--eps", type=float, default=0.3)
    parser.add_argument("--nb-iter", type=int, default=5)
    parser.add_argument("--eps-iter", type=float, default=0.05)
    parser.add_argument("--log-interval", type=int, default=1)
    return parser.parse_args([])


def main():
    args = get_args()
    torch.manual_seed(0)
    trainer = AdvTrainer(args)
    for epoch in range(1, args.epochs + 1):
        trainer.train_epoch(epoch)
        trainer.test()


if __name__ == "__main__":
    main()
