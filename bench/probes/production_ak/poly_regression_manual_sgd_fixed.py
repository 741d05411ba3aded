# expect: clean
# source: https://github.com/pytorch/examples/pull/781
"""Polynomial regression with hand-written gradient descent (pytorch/examples `regression`).

The example grown into a small project: an argparse config, a feature builder for
[x, x^2, x^3, x^4], a target polynomial, a `PolynomialRegressor` wrapping nn.Linear, a
`ManualSGD` helper that applies the gradients itself (with step decay and optional gradient
clipping), a Trainer with train_step / evaluate, an early-stopping callback on the smooth-L1
loss, a pretty-printer for the learned polynomial and a main().
"""
import argparse
from itertools import count

import torch
import torch.nn as nn
import torch.nn.functional as F


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="PyTorch polynomial regression example")
    parser.add_argument("--poly-degree", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--lr-decay", type=float, default=0.5)
    parser.add_argument("--decay-every", type=int, default=200)
    parser.add_argument("--clip", type=float, default=0.0)
    parser.add_argument("--tolerance", type=float, default=1e-3)
    parser.add_argument("--max-batches", type=int, default=1000)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    return parser.parse_args(argv)


class TargetPolynomial:
    """The function to approximate: y = W_target . [x, ..., x^d] + b_target."""

    def __init__(self, degree, generator):
        self.degree = degree
        self.W = torch.randn(degree, 1, generator=generator) * 5
        self.b = torch.randn(1, generator=generator) * 5

    def make_features(self, x):
        x = x.unsqueeze(1)
        return torch.cat([x ** i for i in range(1, self.degree + 1)], 1)

    def __call__(self, features):
        return features.mm(self.W) + self.b.item()

    def get_batch(self, batch_size, generator):
        random = torch.randn(batch_size, generator=generator)
        x = self.make_features(random)
        return x, self(x)


def poly_desc(W, b):
    result = "y = "
    for i, w in enumerate(W):
        result += "{:+.2f} x^{} ".format(w, i + 1)
    return result + "{:+.2f}".format(b[0])


class PolynomialRegressor(nn.Module):
    def __init__(self, degree):
        super().__init__()
        self.fc = nn.Linear(degree, 1)

    def forward(self, x):
        return self.fc(x)

    @property
    def description(self):
        return poly_desc(self.fc.weight.view(-1), self.fc.bias)


class ManualSGD:
    """Plain gradient descent applied by hand, with step decay and optional clipping."""

    def __init__(self, params, lr, decay=1.0, decay_every=0, clip=0.0):
        self.params = list(params)
        self.lr, self.decay, self.decay_every, self.clip = lr, decay, decay_every, clip
        self.num_steps = 0

    def zero_grad(self):
        for param in self.params:
            param.grad = None

    def current_lr(self):
        if self.decay_every <= 0:
            return self.lr
        return self.lr * self.decay ** (self.num_steps // self.decay_every)

    def apply_gradients(self):
        lr = self.current_lr()
        if self.clip > 0:
            nn.utils.clip_grad_norm_(self.params, self.clip)
        for param in self.params:
            param.data.add_(-lr * param.grad)
        self.num_steps += 1


class EarlyStopping:
    def __init__(self, tolerance):
        self.tolerance = tolerance
        self.stopped_at = None

    def __call__(self, batch_idx, loss):
        if loss < self.tolerance:
            self.stopped_at = batch_idx
            return True
        return False


class Trainer:
    def __init__(self, args):
        self.args = args
        self.gen = torch.Generator().manual_seed(args.seed)
        self.target = TargetPolynomial(args.poly_degree, self.gen)
        self.model = PolynomialRegressor(args.poly_degree)
        self.optimizer = ManualSGD(self.model.parameters(), args.lr, args.lr_decay, args.decay_every, args.clip)
        self.early_stopping = EarlyStopping(args.tolerance)

    def train_step(self, batch_x, batch_y):
        self.optimizer.zero_grad()
        output = F.smooth_l1_loss(self.model(batch_x), batch_y)
        loss = output.item()
        output.backward()
        self.optimizer.apply_gradients()
        return loss

    @torch.no_grad()
    def evaluate(self, n=256):
        x, y = self.target.get_batch(n, self.gen)
        return F.mse_loss(self.model(x), y).item()

    def fit(self):
        loss = float("nan")
        for batch_idx in count(1):
            batch_x, batch_y = self.target.get_batch(self.args.batch_size, self.gen)
            loss = self.train_step(batch_x, batch_y)
            if batch_idx % self.args.eval_every == 0:
                print(f"batch {batch_idx}: loss {loss:.6f} eval mse {self.evaluate():.6f} "
                      f"lr {self.optimizer.current_lr():.4f}")
            if self.early_stopping(batch_idx, loss) or batch_idx >= self.args.max_batches:
                break
        return loss, batch_idx


def main():
    args = parse_args([])
    torch.manual_seed(args.seed)
    trainer = Trainer(args)
    loss, batch_idx = trainer.fit()
    print("Loss: {:.6f} after {} batches".format(loss, batch_idx))
    print("==> Learned function:\t" + trainer.model.description)
    print("==> Actual function:\t" + poly_desc(trainer.target.W.view(-1), trainer.target.b))


if __name__ == "__main__":
    main()
