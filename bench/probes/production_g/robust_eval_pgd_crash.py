# expect: no_grad_fn
# source: https://github.com/locuslab/convex_adversarial/issues/34
"""Adversarial training of a small convnet and robust-error evaluation.

Training alternates clean and FGSM-perturbed batches; after every epoch the
model is evaluated on clean data and under an L-inf PGD attack.  Data are
synthetic 1x12x12 "glyph" images (four classes) with additive noise.
"""
import argparse
import time

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim


def parse_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--epsilon", type=float, default=0.1)
    p.add_argument("--pgd-iters", type=int, default=10)
    p.add_argument("--pgd-alpha", type=float, default=0.02)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--n-train", type=int, default=256)
    p.add_argument("--n-test", type=int, default=64)
    p.add_argument("--adv-frac", type=float, default=0.5)
    p.add_argument("--verbose", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


class Flatten(nn.Module):
    def forward(self, x):
        return x.view(x.size(0), -1)


def glyph_model():
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, stride=1, padding=1), nn.ReLU(),
        nn.Conv2d(16, 16, 3, stride=2, padding=1), nn.ReLU(),
        Flatten(), nn.Linear(16 * 6 * 6, 64), nn.ReLU(), nn.Linear(64, 4))


def make_glyphs(n, gen):
    protos = torch.zeros(4, 1, 12, 12)
    protos[0, 0, 2:10, 5:7] = 1.0          # vertical bar
    protos[1, 0, 5:7, 2:10] = 1.0          # horizontal bar
    protos[2, 0, 2:10, 2:10] = torch.eye(8)  # diagonal
    protos[3, 0, 3:9, 3:9] = 0.5           # filled square
    y = torch.randint(0, 4, (n,), generator=gen)
    x = (protos[y] + 0.25 * torch.randn(n, 1, 12, 12, generator=gen)).clamp(0, 1)
    return torch.utils.data.TensorDataset(x, y)


def mean(values):
    return sum(values) / len(values)


def _fgs(model, X, y, epsilon):
    X = X.detach().clone().requires_grad_(True)
    ce = nn.CrossEntropyLoss()(model(X), y)
    grad, = torch.autograd.grad(ce, X)
    return (X + epsilon * grad.sign()).clamp(0, 1).detach()


def _pgd(model, X, y, epsilon, niters=10, alpha=0.01):
    out = model(X)
    err = (out.data.max(1)[1] != y.data).float().sum() / X.size(0)

    X_pgd = X.detach().clone().requires_grad_(True)
    for _ in range(niters):
        opt = optim.Adam([X_pgd], lr=1e-3)
        opt.zero_grad()
        loss = nn.CrossEntropyLoss()(model(X_pgd), y)
        loss.backward()  # raises
        eta = alpha * X_pgd.grad.data.sign()
        X_pgd = (X_pgd.data + eta).requires_grad_(True)
        # project back into the epsilon ball around X
        eta = torch.clamp(X_pgd.data - X.data, -epsilon, epsilon)
        X_pgd = (X.data + eta).clamp(0, 1).requires_grad_(True)

    err_pgd = (model(X_pgd).data.max(1)[1] != y.data).float().sum() / X.size(0)
    return err, err_pgd


def train_adversarial(loader, model, opt, epsilon, epoch, args):
    model.train()
    for i, (X, y) in enumerate(loader):
        n_adv = int(args.adv_frac * X.size(0))
        X = torch.cat([_fgs(model, X[:n_adv], y[:n_adv], epsilon), X[n_adv:]])
        out = model(X)
        ce = nn.CrossEntropyLoss()(out, y)
        err = (out.data.max(1)[1] != y).float().sum() / X.size(0)
        opt.zero_grad()
        ce.backward()
        opt.step()
        if args.verbose and i % args.verbose == 0:
            print(f"[train] epoch {epoch} batch {i} ce {ce.item():.4f} err {err.item():.3f}")


def evaluate_robust(loader, model, epsilon, epoch, args):
    model.eval()
    all_err, all_pgd = [], []
    start = time.time()
    with torch.no_grad():
        for i, (X, y) in enumerate(loader):
            err, err_pgd = _pgd(model, X, y, epsilon, niters=args.pgd_iters, alpha=args.pgd_alpha)
            all_err.append(err.item())
            all_pgd.append(err_pgd.item())
    print(f"[eval] epoch {epoch} err {mean(all_err):.3f} pgd err {mean(all_pgd):.3f} "
          f"({time.time() - start:.1f}s)")
    return mean(all_pgd)


def main(args):
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    train_loader = torch.utils.data.DataLoader(make_glyphs(args.n_train, gen),
                                               batch_size=args.batch_size, shuffle=True)
    test_loader = torch.utils.data.DataLoader(make_glyphs(args.n_test, gen),
                                              batch_size=args.batch_size, shuffle=False)
    model = glyph_model()
    opt = optim.Adam(model.parameters(), lr=args.lr)
    sched = optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    best = 1.0
    for epoch in range(args.epochs):
        train_adversarial(train_loader, model, opt, args.epsilon, epoch, args)
        sched.step()
        robust_err = evaluate_robust(test_loader, model, args.epsilon, epoch, args)
        best = min(best, robust_err)
    print(f"best robust error {best:.3f}")


if __name__ == "__main__":
    main(parse_args([]))
