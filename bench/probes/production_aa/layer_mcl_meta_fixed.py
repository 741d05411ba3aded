# expect: clean
# source: https://github.com/winycg/L-MCL/issues/1
"""Layer-wise mutual contrastive learning (L-MCL) of a cohort of small networks.

Two peer networks with multi-stage embeddings are trained jointly with
cross-entropy, logit distillation from an aggregator, and vanilla/interactive
contrastive losses whose per-layer weights come from a LossWeightNetwork.  The
contrastive criterion is replicated across the configured devices exactly as
the training script does with DataParallel; this CPU version scatters the
batch over `len(args.gpu_id)` replicas.  Data are seeded CIFAR-shaped blobs.
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='L-MCL training (meta)')
    parser.add_argument('--arch', default='tiny_cohort')
    parser.add_argument('--number-net', type=int, default=2)
    parser.add_argument('--batch-size', type=int, default=8)
    parser.add_argument('--epochs', type=int, default=1)
    parser.add_argument('--iters', type=int, default=3)
    parser.add_argument('--alpha', type=float, default=0.1)
    parser.add_argument('--gamma', type=float, default=1.)
    parser.add_argument('--beta', type=float, default=0.1)
    parser.add_argument('--lam', type=float, default=1.)
    parser.add_argument('--kd_T', type=float, default=3)
    parser.add_argument('--tau', type=float, default=0.07)
    parser.add_argument('--feat-dim', type=int, default=16)
    parser.add_argument('--gpu-id', type=str, default='0,1')
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args(argv)
    args.devices = [int(d) for d in args.gpu_id.split(',')]
    return args


class Stage(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(cin, cout, 3, stride=2, padding=1), nn.BatchNorm2d(cout), nn.ReLU())

    def forward(self, x):
        return self.conv(x)


class PeerNet(nn.Module):
    def __init__(self, num_classes, widths=(8, 16)):
        super().__init__()
        self.stages = nn.ModuleList([Stage(3, widths[0]), Stage(widths[0], widths[1])])
        self.heads = nn.ModuleList([nn.Linear(w, num_classes) for w in widths])

    def forward(self, x):
        embeddings, logits = [], []
        for stage, head in zip(self.stages, self.heads):
            x = stage(x)
            e = F.adaptive_avg_pool2d(x, 1).flatten(1)
            embeddings.append(e)
            logits.append(head(e))
        return embeddings, logits


class Cohort(nn.Module):
    def __init__(self, num_classes, number_net):
        super().__init__()
        self.nets = nn.ModuleList([PeerNet(num_classes) for _ in range(number_net)])

    def forward(self, x):
        outs = [n(x) for n in self.nets]
        return [o[0] for o in outs], [o[1] for o in outs]


class LossWeightNetwork(nn.Module):
    def __init__(self, feat_dims):
        super().__init__()
        self.fcs = nn.ModuleList([nn.Linear(d, 1) for dims in feat_dims for d in dims])

    def forward(self, embeddings):
        flat = [e for net in embeddings for e in net]
        return [torch.sigmoid(fc(e)).mean() for fc, e in zip(self.fcs, flat)]


class Embed(nn.Module):
    def __init__(self, dim_in, dim_out):
        super().__init__()
        self.linear = nn.Linear(dim_in, dim_out)

    def forward(self, x):
        return F.normalize(self.linear(x), dim=1)


class Sup_MCL_Loss_Meta(nn.Module):
    def __init__(self, args, feat_dims):
        super().__init__()
        self.args = args
        self.embeds = nn.ModuleList([nn.ModuleList([Embed(d, args.feat_dim) for d in dims]) for dims in feat_dims])

    def _contrast(self, a, b, targets, soft=False):
        logits = a @ b.t() / self.args.tau
        pos = (targets.unsqueeze(0) == targets.unsqueeze(1)).float()
        log_prob = F.log_softmax(logits, dim=1)
        if soft:
            p = F.softmax(logits.detach() / self.args.kd_T, dim=1)
            return -(p * log_prob).sum(1).mean()
        return -((pos * log_prob).sum(1) / pos.sum(1)).mean()

    def forward(self, embeddings, targets, weights):
        loss_vcl = loss_soft_vcl = loss_icl = loss_soft_icl = 0.
        k = 0
        for i, net in enumerate(embeddings):
            for j, e in enumerate(net):
                z = self.embeds[i][j](e)
                w = weights[k]; k += 1
                loss_vcl = loss_vcl + w * self._contrast(z, z, targets)
                loss_soft_vcl = loss_soft_vcl + w * self._contrast(z, z, targets, soft=True)
                other = embeddings[(i + 1) % len(embeddings)][j]
                z_o = self.embeds[(i + 1) % len(embeddings)][j](other)
                loss_icl = loss_icl + w * self._contrast(z, z_o, targets)
                loss_soft_icl = loss_soft_icl + w * self._contrast(z, z_o, targets, soft=True)
        return loss_vcl, loss_soft_vcl, loss_icl, loss_soft_icl


class ReplicatedCriterion(nn.Module):
    """Scatter the batch over the configured devices and gather each replica's outputs (DataParallel)."""

    def __init__(self, module, device_ids):
        super().__init__()
        self.module = module
        self.device_ids = device_ids

    def forward(self, embeddings, targets, weights):
        if len(self.device_ids) <= 1:
            return self.module(embeddings, targets, weights)
        n = len(self.device_ids)
        chunks = targets.chunk(n)
        outputs, start = [], 0
        for t in chunks:
            sl = slice(start, start + len(t)); start += len(t)
            emb = [[e[sl] for e in net] for net in embeddings]
            outputs.append(self.module(emb, t, weights))
        return tuple(torch.stack(vals) for vals in zip(*outputs))


class DistillKL(nn.Module):
    def __init__(self, T):
        super().__init__()
        self.T = T

    def forward(self, y_s, y_t):
        p_s = F.log_softmax(y_s / self.T, dim=1)
        p_t = F.softmax(y_t / self.T, dim=1)
        return F.kl_div(p_s, p_t, reduction='batchmean') * self.T ** 2


class Aggregator(nn.Module):
    def __init__(self, number_net, number_stage, num_classes):
        super().__init__()
        self.mix = nn.Parameter(torch.ones(number_net, number_stage) / number_stage)

    def forward(self, embeddings, logits):
        return [sum(self.mix[i, j] * l for j, l in enumerate(net)) for i, net in enumerate(logits)]


class Runner(object):
    def __init__(self, args, num_classes=4):
        self.args = args
        g = torch.Generator().manual_seed(args.seed)
        self.inputs = torch.randn(48, 3, 16, 16, generator=g)
        self.targets = torch.arange(48) % num_classes
        self.net = Cohort(num_classes, args.number_net)
        feat_dims = [[8, 16] for _ in range(args.number_net)]
        self.weight_net = LossWeightNetwork(feat_dims)
        self.criterion_ce = nn.CrossEntropyLoss()
        self.criterion_div = DistillKL(args.kd_T)
        criterion_mcl = Sup_MCL_Loss_Meta(args, feat_dims)
        aggregator = Aggregator(args.number_net, 2, num_classes)
        trainable = nn.ModuleList([self.net, criterion_mcl, aggregator])
        self.optimizer = torch.optim.SGD(trainable.parameters(), lr=0.1, momentum=0.9, nesterov=True)
        self.weight_optimizer = torch.optim.SGD(self.weight_net.parameters(), lr=0.01, momentum=0.9)
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, T_max=args.epochs)
        self.criterion_mcl = ReplicatedCriterion(criterion_mcl, args.devices)
        self.aggregator = aggregator

    def train_step(self, inputs, targets):
        args = self.args
        self.optimizer.zero_grad()
        embeddings, logits = self.net(inputs)
        with torch.no_grad():
            weights = self.weight_net(embeddings)
        loss_cls = torch.tensor(0.)
        loss_logit_kd = torch.tensor(0.)
        for i in range(len(logits)):
            for j in range(len(logits[i])):
                loss_cls = loss_cls + self.criterion_ce(logits[i][j], targets)
        aggregated_logits = self.aggregator(embeddings, logits)
        for i in range(len(logits)):
            loss_cls = loss_cls + self.criterion_ce(aggregated_logits[i], targets)
            for j in range(len(logits)):
                loss_logit_kd = loss_logit_kd + self.criterion_div(logits[i][-1], aggregated_logits[j].detach())
        loss_vcl, loss_soft_vcl, loss_icl, loss_soft_icl = [
            l.mean() for l in self.criterion_mcl(embeddings, targets, weights)]
        loss_mcl = args.alpha * loss_vcl + args.gamma * loss_soft_vcl \
            + args.beta * loss_icl + args.lam * loss_soft_icl
        loss = loss_cls + loss_logit_kd + loss_mcl
        loss.backward()
        self.optimizer.step()
        return loss.item()

    @torch.no_grad()
    def test(self):
        self.net.eval()
        _, logits = self.net(self.inputs)
        self.net.train()
        return [(l[-1].argmax(1) == self.targets).float().mean().item() for l in logits]

    def train(self):
        bs = self.args.batch_size
        for epoch in range(self.args.epochs):
            start = time.time()
            for it in range(self.args.iters):
                sl = slice(it * bs, (it + 1) * bs)
                loss = self.train_step(self.inputs[sl], self.targets[sl])
            self.scheduler.step()
            print('Epoch:{} loss:{:.4f} acc:{} Duration:{:.2f}'.format(epoch, loss, self.test(), time.time() - start))


def main():
    args = parse_args([])
    torch.manual_seed(args.seed)
    Runner(args).train()


if __name__ == '__main__':
    main()
