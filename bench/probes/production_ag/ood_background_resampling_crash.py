# expect: inplace_version
# source: https://github.com/JerryYLi/bg-resample-ood/issues/1
"""Out-of-distribution detection with learned background resampling.

An in-distribution classifier is fine-tuned with an outlier-exposure loss on
background (auxiliary OOD) images; a vector of per-sample resampling logits
over the background set is learned adversarially (it maximises the OOD loss)
with its own optimizer.  Layout follows the project: argparse options, meters,
a `train_epoch_resample` routine, evaluation, and a runner that owns the
models, optimizers and schedulers.  Synthetic images, CPU.
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args(argv=()):
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--bg-size", type=int, default=64)
    p.add_argument("--num-classes", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--lr-w", type=float, default=0.1)
    p.add_argument("--ood-weight", type=float, default=0.5)
    p.add_argument("--topk", type=int, nargs="+", default=[1, 5])
    p.add_argument("--print-freq", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(list(argv))


class AverageMeter:
    def __init__(self):
        self.val = self.avg = self.sum = 0.0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def accuracy(output, target, topk=(1,)):
    maxk = max(topk)
    _, pred = output.topk(maxk, 1, True, True)
    correct = pred.t().eq(target.view(1, -1).expand_as(pred.t()))
    return [correct[:k].reshape(-1).float().sum().item() / target.size(0) for k in topk]


class SmallResNet(nn.Module):
    def __init__(self, num_classes, width=16):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU())
        self.block = nn.Sequential(nn.Conv2d(width, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU())
        self.fc = nn.Linear(width, num_classes)

    def forward(self, x):
        h = self.stem(x)
        h = h + self.block(h)
        return self.fc(F.adaptive_avg_pool2d(h, 1).flatten(1))


class WeightedOELoss(nn.Module):
    """Outlier exposure: push background predictions towards uniform."""

    def __init__(self, weight=0.5):
        super().__init__()
        self.weight = weight

    def forward(self, outputs, weights=None):
        per_sample = -(outputs.mean(1) - torch.logsumexp(outputs, dim=1))
        if weights is None:
            return self.weight * per_sample.mean()
        return self.weight * (weights * per_sample).mean()


def make_loaders(args):
    g = torch.Generator().manual_seed(args.seed)
    in_x = torch.randn(args.iters * args.batch_size, 3, 16, 16, generator=g)
    in_y = torch.randint(0, args.num_classes, (in_x.size(0),), generator=g)
    bg_x = torch.randn(args.bg_size, 3, 16, 16, generator=g) * 1.5

    def loader1():
        for i in range(args.iters):
            sl = slice(i * args.batch_size, (i + 1) * args.batch_size)
            yield in_x[sl], in_y[sl]

    def loader2():
        while True:
            idx = torch.randint(0, args.bg_size, (args.batch_size,), generator=g)
            yield idx, bg_x[idx], torch.zeros(args.batch_size, dtype=torch.long)

    return loader1, loader2


def train_epoch_resample(epoch, loader1, loader2, weight_params, model, loss2, optimizer, optimizer_w, scheduler, args):
    model.eval()

    losses = AverageMeter()
    losses_w = AverageMeter()
    accs = [AverageMeter() for _ in args.topk]
    for i, (inputs, targets) in enumerate(loader1):
        N = inputs.size(0)
        indices, inputs2, _ = next(loader2)
        inputs = torch.cat((inputs, inputs2), 0)

        # resampling weights
        w = F.softplus(weight_params)
        scale = (w ** .5).mean() / (w.mean() ** .5)
        weights = scale * (w[indices] / w.mean()) ** .5

        # forward
        outputs = model(inputs)
        loss = F.cross_entropy(outputs[:N], targets)
        loss_ood = loss2(outputs[N:], weights)
        loss += loss_ood
        losses.update(loss.item(), inputs.size(0))
        loss_w = -loss_ood
        losses_w.update(loss_w.item(), inputs.size(0))

        # evaluate
        acc = accuracy(outputs[:N], targets, args.topk)
        for j in range(len(accs)):
            accs[j].update(acc[j], inputs.size(0))

        # backward
        optimizer.zero_grad()
        loss.backward(retain_graph=True)
        optimizer.step()
        optimizer_w.zero_grad()
        loss_w.backward()  # raises
        optimizer_w.step()

        if args.print_freq > 0 and (i + 1) % args.print_freq == 0:
            print('Epoch {}\tIteration {}\tLoss {:.3f}\tLoss_w {:.3f}\tPrec {:.2%}'
                  .format(epoch, i + 1, losses.val, losses_w.val, acc[0]))

    if scheduler is not None:
        scheduler.step()
    print('w min={:.3f}, avg={:.3f}, max={:.3f}'.format(w.min(), w.mean(), w.max()))
    return losses.avg, [a.avg for a in accs]


@torch.no_grad()
def eval_ood(model, args):
    g = torch.Generator().manual_seed(args.seed + 100)
    x_in = torch.randn(32, 3, 16, 16, generator=g)
    x_out = torch.randn(32, 3, 16, 16, generator=g) * 1.5
    score_in = torch.softmax(model(x_in), 1).max(1).values
    score_out = torch.softmax(model(x_out), 1).max(1).values
    return float((score_in[:, None] > score_out[None, :]).float().mean())


class ResampleRunner:
    def __init__(self, args):
        self.args = args
        torch.manual_seed(args.seed)
        self.model = SmallResNet(args.num_classes)
        self.loss2 = WeightedOELoss(args.ood_weight)
        self.weight_params = nn.Parameter(torch.zeros(args.bg_size))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=args.lr, momentum=0.9,
                                         weight_decay=5e-4, nesterov=True)
        self.optimizer_w = torch.optim.Adam([self.weight_params], lr=args.lr_w)
        total = args.epochs
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda e: 0.5 * (1 + math.cos(math.pi * e / total)))
        self.loader1, self.loader2 = make_loaders(args)
        self._bg_iter = None

    @property
    def bg_iter(self):
        if self._bg_iter is None:
            self._bg_iter = self.loader2()
        return self._bg_iter

    def run(self):
        best = 0.0
        for epoch in range(1, self.args.epochs + 1):
            train_epoch_resample(epoch, self.loader1(), self.bg_iter, self.weight_params, self.model,
                                 self.loss2, self.optimizer, self.optimizer_w, self.scheduler, self.args)
            auroc = eval_ood(self.model, self.args)
            best = max(best, auroc)
            print(f"epoch {epoch}: AUROC {auroc:.3f} (best {best:.3f})")
        return best


def main():
    ResampleRunner(get_args()).run()


if __name__ == "__main__":
    main()
