# expect: clean
# source: https://github.com/Linardos/SalEMA/issues/7
"""SalEMA: video saliency with an exponential moving average over a conv feature map.

Small synthetic clips replace DHF1K; the network is a shrunken SalGAN-like
encoder/decoder.  With ``-alpha`` left to None the EMA weight is learned with
its own learning rate.
"""
import argparse
import time

import numpy as np
import torch
import torch.nn as nn
from torch.nn.functional import interpolate

parser = argparse.ArgumentParser()
parser.add_argument('-new_model', dest='new_model', default='SalEMA')
parser.add_argument('-ema_loc', dest='ema_loc', default=4, type=int)
parser.add_argument('-alpha', dest='alpha', default=None, type=float)
parser.add_argument('-residual', dest='residual', default=False)
parser.add_argument('-dropout', dest='dropout', default=True)
parser.add_argument('-lr', dest='lr', default=1e-4, type=float)
parser.add_argument('-epochs', dest='epochs', default=2, type=int)
parser.add_argument('-use_gpu', dest='use_gpu', default='auto')
parser.add_argument('-precision', dest='precision', default='double')
args = parser.parse_args([])

weight_decay = 1e-4
clip_length = 6
LEARN_ALPHA_ONLY = False
device = torch.device('cuda' if (args.use_gpu != 'cpu' and torch.cuda.is_available()) else 'cpu')
dtype = torch.float64 if args.precision == 'double' else torch.float32


def to_device(t):
    """Move a tensor to the training device / precision."""
    return t.to(device=device, dtype=dtype)


class SalEMA(nn.Module):
    """The smaller the alpha, the less each newly added frame will impact the outcome."""

    def __init__(self, alpha, ema_loc, residual, dropout):
        super(SalEMA, self).__init__()
        self.dropout = dropout
        self.residual = residual
        if alpha is None:
            self.alpha = nn.Parameter(to_device(torch.Tensor([0.25])))
            print("Initial alpha set to: {}".format(self.alpha))
        else:
            self.alpha = to_device(torch.Tensor([alpha]))
        assert (self.alpha <= 1 and self.alpha >= 0)
        self.ema_loc = ema_loc
        encoder = [nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                   nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                   nn.Conv2d(32, 32, 3, padding=1)]
        decoder = [nn.ReLU(), nn.Conv2d(32, 16, 3, padding=1), nn.ReLU(),
                   nn.Upsample(scale_factor=4), nn.Conv2d(16, 1, 1), nn.Sigmoid()]
        self.salgan = nn.Sequential(*(encoder + decoder))
        self.drop = nn.Dropout2d(0.1)

    def forward(self, input_, prev_state=None):
        x = self.salgan[:self.ema_loc](input_)
        residual = x
        if self.dropout:
            x = self.drop(x)
        if prev_state is None:
            current_state = self.salgan[self.ema_loc](x)
        else:
            current_state = torch.sigmoid(self.alpha) * self.salgan[self.ema_loc](x) + \
                (1 - torch.sigmoid(self.alpha)) * prev_state
        x = current_state + residual if self.residual else current_state
        x = self.salgan[self.ema_loc + 1:](x)
        return current_state, x.squeeze(1)


def make_clips(n_clips, seed):
    g = torch.Generator().manual_seed(seed)
    clips, maps = [], []
    for _ in range(n_clips):
        centre = torch.randint(4, 12, (2,), generator=g).float()
        frames, sal = [], []
        for t in range(clip_length):
            yy, xx = torch.meshgrid(torch.arange(16.), torch.arange(16.), indexing='ij')
            c = centre + t * 0.5
            blob = torch.exp(-((yy - c[0]) ** 2 + (xx - c[1]) ** 2) / 8.0)
            frames.append(blob.expand(3, 16, 16) + 0.1 * torch.randn(3, 16, 16, generator=g))
            sal.append(blob / blob.max())
        clips.append(torch.stack(frames))
        maps.append(torch.stack(sal))
    return clips, maps


def NSS(saliency_map, fixation_map):
    s = (saliency_map - saliency_map.mean()) / (saliency_map.std() + 1e-8)
    return float((s * (fixation_map > 0.9)).sum() / ((fixation_map > 0.9).sum() + 1e-8))


def CC(saliency_map, gt):
    a, b = saliency_map - saliency_map.mean(), gt - gt.mean()
    return float((a * b).sum() / (torch.sqrt((a * a).sum() * (b * b).sum()) + 1e-8))


def train(train_loader, model, criterion, optimizer, epoch):
    model.train()
    frame_losses = []
    for clip, gt in train_loader:
        state = None
        optimizer.zero_grad()
        loss = 0
        for t in range(clip_length):
            state, saliency_map = model(to_device(clip[t:t + 1]), prev_state=state)
            loss = loss + criterion(saliency_map, to_device(gt[t:t + 1]))
        (loss / clip_length).backward()
        optimizer.step()
        frame_losses.append(loss.item() / clip_length)
    return float(np.mean(frame_losses))


@torch.no_grad()
def validate(val_loader, model):
    model.eval()
    nss, cc = [], []
    for clip, gt in val_loader:
        state = None
        for t in range(clip_length):
            state, saliency_map = model(to_device(clip[t:t + 1]), prev_state=state)
            nss.append(NSS(saliency_map[0], to_device(gt[t])))
            cc.append(CC(saliency_map[0], to_device(gt[t])))
    return float(np.mean(nss)), float(np.mean(cc))


def main(args):
    torch.manual_seed(65)
    train_loader = list(zip(*make_clips(8, seed=1)))
    val_loader = list(zip(*make_clips(3, seed=2)))
    print("Size of train set is {}".format(len(train_loader)))
    model = SalEMA(alpha=args.alpha, residual=args.residual, dropout=args.dropout, ema_loc=args.ema_loc)
    model = model.to(device=device, dtype=dtype)
    print("Initialized {} with residual set to {} and dropout set to {}".format(
        args.new_model, args.residual, args.dropout))
    criterion = nn.BCELoss()
    if args.alpha is None:
        optimizer = torch.optim.Adam([{'params': model.salgan.parameters(), 'lr': args.lr, 'weight_decay': weight_decay}, {'params': model.alpha, 'lr': 0.1}])
    else:
        optimizer = torch.optim.Adam([
            {'params': model.salgan.parameters(), 'lr': args.lr, 'weight_decay': weight_decay}])
    if LEARN_ALPHA_ONLY:
        optimizer = torch.optim.Adam([{'params': [model.alpha]}], 0.1)

    start = time.time()
    for epoch in range(args.epochs):
        train_loss = train(train_loader, model, criterion, optimizer, epoch)
        nss, cc = validate(val_loader, model)
        print("Epoch {}/{} done with train loss {:.4f}, NSS {:.3f}, CC {:.3f}, alpha {:.3f}".format(
            epoch + 1, args.epochs, train_loss, nss, cc, torch.sigmoid(model.alpha).item()))
    print("Training took {:.1f}s".format(time.time() - start))


main(args)
