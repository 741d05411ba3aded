# expect: leaf_inplace
# source: https://github.com/official-stockfish/nnue-pytorch/pull/75
"""NNUE evaluation network trainer (nnue-pytorch layout, synthetic positions).

A sparse feature transformer over HalfKP-style features with optional
factorized ("virtual") features, a small clipped-ReLU layer stack, weight
clipping so the net stays inside the int8/int16 ranges used by the quantized
engine, and a Lightning-like training step mixing the engine score with the
game result.  Sparse positions are generated from a seeded RNG.
"""
import argparse
from collections import OrderedDict

import torch
import torch.nn as nn
import torch.nn.functional as F

L1 = 32
L2 = 8
L3 = 16


class FeatureBlock(object):
    def __init__(self, name, num_real_features, factors=None):
        self.name = name
        self.num_real_features = num_real_features
        self.factors = factors or OrderedDict()
        self.num_virtual_features = sum(self.factors.values())
        self.num_features = self.num_real_features + self.num_virtual_features

    def get_virtual_feature_ranges(self, offset):
        ranges = []
        start = offset + self.num_real_features
        for size in self.factors.values():
            ranges.append((start, start + size))
            start += size
        return ranges

    def get_feature_factors(self, idx):
        out = [idx]
        base = self.num_real_features
        for size in self.factors.values():
            out.append(base + idx % size)
            base += size
        return out


class FeatureSet(object):
    def __init__(self, blocks):
        self.blocks = blocks
        self.name = '+'.join(b.name for b in blocks)
        self.num_real_features = sum(b.num_real_features for b in blocks)
        self.num_virtual_features = sum(b.num_virtual_features for b in blocks)
        self.num_features = sum(b.num_features for b in blocks)

    def get_virtual_feature_ranges(self):
        ranges, offset = [], 0
        for b in self.blocks:
            ranges += b.get_virtual_feature_ranges(offset)
            offset += b.num_features
        return ranges


def get_feature_set_from_name(name):
    if name == 'HalfKP':
        return FeatureSet([FeatureBlock('HalfKP', 640)])
    if name == 'HalfKP^':
        return FeatureSet([FeatureBlock('HalfKP^', 640, OrderedDict([('HalfK', 64), ('P', 10)]))])
    raise Exception('No feature set named {}'.format(name))


class NNUE(nn.Module):
    def __init__(self, feature_set, lambda_=1.0):
        super().__init__()
        self.feature_set = feature_set
        self.input = nn.Linear(feature_set.num_features, L1)
        self.l1 = nn.Linear(2 * L1, L2)
        self.l2 = nn.Linear(L2, L3)
        self.output = nn.Linear(L3, 1)
        self.lambda_ = lambda_
        self.weight_clipping = [
            {'params': [self.l1.weight], 'min_weight': -127 / 64, 'max_weight': 127 / 64},
            {'params': [self.l2.weight], 'min_weight': -127 / 64, 'max_weight': 127 / 64},
            {'params': [self.output.weight], 'min_weight': -127 * 127 / 9600, 'max_weight': 127 * 127 / 9600},
        ]
        self._init_layers()

    def _zero_virtual_feature_weights(self):
        weights = self.input.weight
        for a, b in self.feature_set.get_virtual_feature_ranges():
            weights[:, a:b] = 0.0  # raises
        self.input.weight = nn.Parameter(weights)

    def _init_layers(self):
        # The virtual features must start at zero so the factorized net equals the real one.
        self._zero_virtual_feature_weights()
        with torch.no_grad():
            self.output.bias.zero_()

    def _clip_weights(self):
        for group in self.weight_clipping:
            for p in group['params']:
                p_data_fp32 = p.data
                p_data_fp32.clamp_(group['min_weight'], group['max_weight'])
                p.data.copy_(p_data_fp32)

    def coalesced_input_weight(self):
        weight = self.input.weight.data.clone()
        for a, b in self.feature_set.get_virtual_feature_ranges():
            weight[:, :self.feature_set.num_real_features] += weight[:, a:b].mean(1, keepdim=True)
        return weight[:, :self.feature_set.num_real_features]

    def forward(self, us, them, white, black):
        w = self.input(white)
        b = self.input(black)
        l0_ = (us * torch.cat([w, b], dim=1)) + (them * torch.cat([b, w], dim=1))
        l0_ = torch.clamp(l0_, 0.0, 1.0)
        l1_ = torch.clamp(self.l1(l0_), 0.0, 1.0)
        l2_ = torch.clamp(self.l2(l1_), 0.0, 1.0)
        return self.output(l2_)

    def step_(self, batch, loss_type):
        us, them, white, black, outcome, score = batch
        # 600 is the kPonanzaConstant scaling factor used by the engine
        scaling = 361
        q = self(us, them, white, black) * 600 / scaling
        t = outcome
        p = (score / scaling).sigmoid()
        epsilon = 1e-12
        teacher_entropy = -(p * (p + epsilon).log() + (1.0 - p) * (1.0 - p + epsilon).log())
        outcome_entropy = -(t * (t + epsilon).log() + (1.0 - t) * (1.0 - t + epsilon).log())
        teacher_loss = -(p * F.logsigmoid(q) + (1.0 - p) * F.logsigmoid(-q))
        outcome_loss = -(t * F.logsigmoid(q) + (1.0 - t) * F.logsigmoid(-q))
        result = self.lambda_ * teacher_loss + (1.0 - self.lambda_) * outcome_loss
        entropy = self.lambda_ * teacher_entropy + (1.0 - self.lambda_) * outcome_entropy
        loss = result.mean() - entropy.mean()
        return loss


class PositionStream(object):
    """Stands in for the binpack reader: seeded sparse positions with scores."""

    def __init__(self, feature_set, batch_size, seed):
        self.fs = feature_set
        self.batch_size = batch_size
        self.gen = torch.Generator().manual_seed(seed)

    def _sparse_side(self):
        idx = torch.randint(0, self.fs.num_real_features, (self.batch_size, 12), generator=self.gen)
        dense = torch.zeros(self.batch_size, self.fs.num_features)
        dense.scatter_(1, idx, 1.0)
        for block in self.fs.blocks:
            for f in range(1, len(block.factors) + 1):
                fidx = torch.tensor([[block.get_feature_factors(int(i))[f] for i in row] for row in idx])
                dense.scatter_(1, fidx, 1.0)
        return dense

    def next(self):
        us = torch.randint(0, 2, (self.batch_size, 1), generator=self.gen).float()
        them = 1.0 - us
        white, black = self._sparse_side(), self._sparse_side()
        outcome = torch.randint(0, 3, (self.batch_size, 1), generator=self.gen).float() / 2.0
        score = torch.randn(self.batch_size, 1, generator=self.gen) * 300
        return us, them, white, black, outcome, score


class Trainer(object):
    def __init__(self, args):
        self.args = args
        self.feature_set = get_feature_set_from_name(args.features)
        self.nnue = NNUE(self.feature_set, lambda_=args.lambda_)
        train_params = [
            {'params': self.nnue.input.parameters(), 'lr': args.lr},
            {'params': list(self.nnue.l1.parameters()) + list(self.nnue.l2.parameters())
                       + list(self.nnue.output.parameters()), 'lr': args.lr},
        ]
        self.optimizer = torch.optim.Adadelta(train_params, lr=args.lr)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=1, gamma=0.987)
        self.train_stream = PositionStream(self.feature_set, args.batch_size, args.seed)
        self.val_stream = PositionStream(self.feature_set, args.batch_size, args.seed + 1)

    def train_step(self, batch):
        self.nnue.train()
        self.optimizer.zero_grad()
        loss = self.nnue.step_(batch, 'train_loss')
        loss.backward()
        self.optimizer.step()
        # Keep the weights inside the ranges the quantized engine can represent.
        self.nnue._clip_weights()
        return loss.item()

    @torch.no_grad()
    def evaluate(self):
        self.nnue.eval()
        return sum(self.nnue.step_(self.val_stream.next(), 'val_loss').item() for _ in range(2)) / 2

    def fit(self):
        for epoch in range(self.args.epochs):
            losses = [self.train_step(self.train_stream.next()) for _ in range(self.args.steps)]
            self.scheduler.step()
            print('epoch %d train %.4f val %.4f' % (epoch, sum(losses) / len(losses), self.evaluate()))
        return self.nnue.coalesced_input_weight()


def main():
    parser = argparse.ArgumentParser(description='Trains the network.')
    parser.add_argument('--features', default='HalfKP^')
    parser.add_argument('--lambda', dest='lambda_', type=float, default=1.0)
    parser.add_argument('--lr', type=float, default=1.0)
    parser.add_argument('--batch-size', type=int, default=16)
    parser.add_argument('--epochs', type=int, default=2)
    parser.add_argument('--steps', type=int, default=4)
    parser.add_argument('--seed', type=int, default=42)
    args = parser.parse_args([])
    torch.manual_seed(args.seed)
    Trainer(args).fit()


if __name__ == '__main__':
    main()
