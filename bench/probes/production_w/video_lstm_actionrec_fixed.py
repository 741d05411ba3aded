# expect: clean
# source: https://github.com/pytorch/pytorch/issues/2769
"""Temporal LSTM head for video action recognition on pre-extracted features.

Each video clip is represented by a sequence of per-frame CNN features (as
produced by a TSN/Inception backbone, 1024-d in the original setup, smaller
here).  An LSTM runs over the frames and a linear layer on the last output
predicts one of the action classes (UCF101-style).  The training script keeps
the usual structure: argparse options, AverageMeter bookkeeping, step LR
schedule, train/validate per epoch, best-checkpoint tracking in memory and a
logging callback.  Synthetic clip features replace the feature files.
"""
import argparse
import copy
import logging
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

logger = logging.getLogger("lstm_action")


def get_args(argv=None):
    p = argparse.ArgumentParser(description="LSTM on frame features")
    p.add_argument("--input_len", type=int, default=32)
    p.add_argument("--hidden_len", type=int, default=32)
    p.add_argument("--model_len", type=int, default=6, help="frames per clip")
    p.add_argument("--num_classes", type=int, default=5)
    p.add_argument("--batch_size", type=int, default=4)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight_decay", type=float, default=5e-4)
    p.add_argument("--lr_steps", type=int, nargs="+", default=[10, 20])
    p.add_argument("--print_freq", type=int, default=2)
    p.add_argument("--is_softmax", type=int, default=1)
    return p.parse_args(argv)


class ClipFeatureDataset(Dataset):
    """Stands in for the per-video feature files (frames x feature_dim)."""

    def __init__(self, n_clips, model_len, input_len, num_classes, seed):
        g = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, num_classes, (n_clips,), generator=g)
        protos = torch.randn(num_classes, input_len, generator=g)
        noise = 0.5 * torch.randn(n_clips, model_len, input_len, generator=g)
        self.feats = protos[self.labels].unsqueeze(1) + noise

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        return self.feats[idx], self.labels[idx]


class LSTM(nn.Module):
    def __init__(self, input_len=1024, hidden_len=1024, model_len=12, target_size=101,
                 is_softmax=True, batch_size=1):
        super(LSTM, self).__init__()
        self.hidden_len = hidden_len
        self.is_softmax = is_softmax
        self.model_len = model_len
        self.batch_size = batch_size
        self.lstm = nn.LSTM(input_len, hidden_len, batch_first=True)
        self.target_size = target_size
        self.hidden2class = nn.Linear(hidden_len, target_size)
        self.hidden = self.init_hidden()

    def init_hidden(self):
        return (torch.zeros(1, self.batch_size, self.hidden_len),
                torch.zeros(1, self.batch_size, self.hidden_len))

    def forward(self, x):
        lstm_out, self.hidden = self.lstm(x, self.hidden)
        cls_scores = self.hidden2class(lstm_out[:, -1, :]).view(-1, self.target_size)
        if self.is_softmax:
            cls_scores = F.log_softmax(cls_scores, dim=1)
        return cls_scores


class AverageMeter(object):
    def __init__(self):
        self.reset()

    def reset(self):
        self.val = self.avg = self.sum = 0.0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def accuracy(output, target, topk=(1,)):
    maxk = max(topk)
    batch_size = target.size(0)
    _, pred = output.topk(maxk, 1, True, True)
    correct = pred.t().eq(target.view(1, -1).expand_as(pred.t()))
    return [correct[:k].reshape(-1).float().sum(0) * (100.0 / batch_size) for k in topk]


def adjust_learning_rate(optimizer, epoch, base_lr, lr_steps):
    decay = 0.1 ** (sum(epoch >= np.array(lr_steps)))
    for param_group in optimizer.param_groups:
        param_group["lr"] = base_lr * decay


def train(train_data, model, criterion, optimizer, epoch, args, callbacks=()):
    batch_time, losses, top1 = AverageMeter(), AverageMeter(), AverageMeter()
    model.train()
    end = time.time()
    for i, (input, target) in enumerate(train_data):
        model.hidden = model.init_hidden()
        output = model(input)
        loss = criterion(output, target)
        prec1, = accuracy(output.detach(), target, topk=(1,))
        losses.update(loss.item(), input.size(0))
        top1.update(prec1.item(), input.size(0))

        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 20)
        optimizer.step()

        batch_time.update(time.time() - end)
        end = time.time()
        for cb in callbacks:
            cb("train", epoch, i, len(train_data), losses, top1, optimizer)
    return losses.avg, top1.avg


@torch.no_grad()
def validate(val_data, model, criterion):
    losses, top1 = AverageMeter(), AverageMeter()
    model.eval()
    for input, target in val_data:
        output = model(input)
        loss = criterion(output, target)
        prec1, = accuracy(output, target, topk=(1,))
        losses.update(loss.item(), input.size(0))
        top1.update(prec1.item(), input.size(0))
    return losses.avg, top1.avg


def make_logging_callback(print_freq):
    def _cb(stage, epoch, i, n, losses, top1, optimizer):
        if i % print_freq == 0:
            logger.info("Epoch: [%d][%d/%d], lr: %.5f\tLoss %.4f (%.4f)\tPrec@1 %.3f (%.3f)",
                        epoch, i, n, optimizer.param_groups[-1]["lr"],
                        losses.val, losses.avg, top1.val, top1.avg)
    return _cb


class Runner:
    def __init__(self, args):
        self.args = args
        self.model = LSTM(args.input_len, args.hidden_len, args.model_len, args.num_classes,
                          is_softmax=bool(args.is_softmax), batch_size=args.batch_size)
        self.criterion = nn.NLLLoss()
        self.optimizer = torch.optim.SGD(self.model.parameters(), args.lr,
                                         momentum=args.momentum, weight_decay=args.weight_decay)
        train_set = ClipFeatureDataset(24, args.model_len, args.input_len, args.num_classes, seed=1)
        val_set = ClipFeatureDataset(8, args.model_len, args.input_len, args.num_classes, seed=2)
        self.train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, drop_last=True)
        self.val_loader = DataLoader(val_set, batch_size=args.batch_size, shuffle=False, drop_last=True)
        self.callbacks = [make_logging_callback(args.print_freq)]
        self.best_prec1 = 0.0
        self.best_state = None

    def run(self):
        for epoch in range(self.args.epochs):
            adjust_learning_rate(self.optimizer, epoch, self.args.lr, self.args.lr_steps)
            train(self.train_loader, self.model, self.criterion, self.optimizer, epoch,
                  self.args, self.callbacks)
            _, prec1 = validate(self.val_loader, self.model, self.criterion)
            if prec1 > self.best_prec1:
                self.best_prec1 = prec1
                self.best_state = copy.deepcopy(self.model.state_dict())
        return self.best_prec1


def main():
    torch.manual_seed(0)
    np.random.seed(0)
    args = get_args([])
    best = Runner(args).run()
    print("best Prec@1: %.3f" % best)


if __name__ == "__main__":
    main()
