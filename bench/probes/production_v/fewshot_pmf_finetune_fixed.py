# expect: clean
# source: https://github.com/hushell/pmf_cvpr22/issues/15
"""P>M>F style few-shot classification: ProtoNet meta-training with an optional
test-time fine-tuning deployment (pmf_cvpr22 layout).

ProtoNet classifies queries by cosine similarity to support prototypes.
ProtoNet_Finetune copies the backbone and fine-tunes it on augmented support
images for a few steps before classifying the queries.  args.deploy selects the
model variant; the engine runs meta-training epochs and meta-test evaluation.
Synthetic 5-way 2-shot episodes of 16x16 images, CPU only.
"""
import argparse
import copy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args_parser():
    p = argparse.ArgumentParser("pmf", add_help=False)
    p.add_argument("--deploy", type=str, default="finetune", choices=["vanilla", "finetune"])
    p.add_argument("--ada_steps", type=int, default=3)
    p.add_argument("--ada_lr", type=float, default=1e-2)
    p.add_argument("--aug_prob", type=float, default=0.9)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--episodes_per_epoch", type=int, default=3)
    p.add_argument("--nClsEpisode", type=int, default=5)
    p.add_argument("--nSupport", type=int, default=2)
    p.add_argument("--nQuery", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    return p


class Backbone(nn.Module):
    def __init__(self, dim=32):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Conv2d(16, dim, 3, 1, 1), nn.BatchNorm2d(dim), nn.ReLU(),
                                 nn.AdaptiveAvgPool2d(1), nn.Flatten())

    def forward(self, x):
        return self.net(x)


class ProtoNet(nn.Module):
    def __init__(self, backbone):
        super().__init__()
        self.backbone = backbone
        self.bias = nn.Parameter(torch.FloatTensor(1).fill_(0), requires_grad=True)
        self.scale_cls = nn.Parameter(torch.FloatTensor(1).fill_(10), requires_grad=True)

    def cos_classifier(self, w, f):
        f = F.normalize(f, p=2, dim=f.dim() - 1, eps=1e-12)
        w = F.normalize(w, p=2, dim=w.dim() - 1, eps=1e-12)
        cls_scores = f @ w.transpose(1, 2)
        return self.scale_cls * (cls_scores + self.bias)

    def forward(self, supp_x, supp_y, x):
        num_classes = supp_y.max() + 1
        B, nSupp, C, H, W = supp_x.shape
        supp_f = self.backbone.forward(supp_x.view(-1, C, H, W)).view(B, nSupp, -1)
        supp_y_1hot = F.one_hot(supp_y, num_classes).transpose(1, 2)
        prototypes = torch.bmm(supp_y_1hot.float(), supp_f)
        prototypes = prototypes / supp_y_1hot.sum(dim=2, keepdim=True)
        feat = self.backbone.forward(x.view(-1, C, H, W)).view(B, x.shape[1], -1)
        return self.cos_classifier(prototypes, feat)


class DiffAugment:
    def __init__(self, prob):
        self.prob = prob

    def __call__(self, x):
        if np.random.rand() < self.prob:
            x = x + 0.1 * torch.randn_like(x)
        if np.random.rand() < self.prob:
            x = torch.flip(x, dims=[-1])
        return x


class ProtoNet_Finetune(ProtoNet):
    def __init__(self, backbone, num_iters=50, lr=5e-2, aug_prob=0.9):
        super().__init__(backbone)
        self.num_iters = num_iters
        self.lr = lr
        self.aug = DiffAugment(aug_prob)

    def forward(self, supp_x, supp_y, x):
        x = x.squeeze(0)
        backbone_state = self.backbone.state_dict()
        backbone = copy.deepcopy(self.backbone)
        backbone.load_state_dict(backbone_state)
        num_classes = supp_y.max() + 1
        supp_y_1hot = F.one_hot(supp_y, num_classes).transpose(1, 2)
        supp_x_ = supp_x.squeeze(0)
        opt = torch.optim.Adam(backbone.parameters(), lr=self.lr, betas=(0.9, 0.999), weight_decay=0.)

        def single_step(z, mode=True):
            with torch.set_grad_enabled(mode):
                supp_f = backbone.forward(supp_x_).unsqueeze(0)
                prototypes = torch.bmm(supp_y_1hot.float(), supp_f)
                prototypes = prototypes / supp_y_1hot.sum(dim=2, keepdim=True)
                feat = backbone.forward(z).unsqueeze(0)
                logits = self.cos_classifier(prototypes, feat)
                loss = None
                if mode:
                    supp_y_ = supp_y.view(-1)
                    loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), supp_y_)
            return logits, loss

        if self.lr > 0 and self.num_iters > 0:
            for _ in range(self.num_iters):
                opt.zero_grad()
                z = self.aug(supp_x_)
                _, loss = single_step(z, True)
                loss.backward()
                opt.step()
        logits, _ = single_step(x, False)
        return logits


def get_model(args):
    backbone = Backbone()
    if args.deploy == "vanilla":
        return ProtoNet(backbone)
    return ProtoNet_Finetune(backbone, args.ada_steps, args.ada_lr, args.aug_prob)


def sample_episode(args, g):
    n, s, q = args.nClsEpisode, args.nSupport, args.nQuery
    centers = torch.randn(n, 3, 1, 1, generator=g)
    supp_x = (centers.repeat_interleave(s, 0) + 0.5 * torch.randn(n * s, 3, 16, 16, generator=g)).unsqueeze(0)
    x = (centers.repeat_interleave(q, 0) + 0.5 * torch.randn(n * q, 3, 16, 16, generator=g)).unsqueeze(0)
    supp_y = torch.arange(n).repeat_interleave(s).unsqueeze(0)
    y = torch.arange(n).repeat_interleave(q).unsqueeze(0)
    return supp_x, supp_y, x, y


def train_one_epoch(data_loader, model, criterion, optimizer, epoch):
    model.train()
    for it, (SupportTensor, SupportLabel, x, y) in enumerate(data_loader):
        output = model(SupportTensor, SupportLabel, x)
        output = output.view(x.shape[0] * x.shape[1], -1)
        y = y.view(-1)
        loss = criterion(output, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        acc = (output.argmax(-1) == y).float().mean().item()
        print("epoch %d it %d loss %.4f acc %.3f" % (epoch, it, loss.item(), acc))


def evaluate(data_loader, model):
    model.eval()
    accs = []
    for SupportTensor, SupportLabel, x, y in data_loader:
        output = model(SupportTensor, SupportLabel, x).detach()
        accs.append((output.view(-1, output.shape[-1]).argmax(-1) == y.view(-1)).float().mean().item())
    return float(np.mean(accs))


def main(args):
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    g = torch.Generator().manual_seed(args.seed)
    train_loader = [sample_episode(args, g) for _ in range(args.episodes_per_epoch)]
    test_loader = [sample_episode(args, g) for _ in range(2)]
    model = get_model(argparse.Namespace(**{**vars(args), "deploy": "vanilla"}))
    test_model = get_model(args)
    test_model.load_state_dict(model.state_dict())
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    lr_scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs)
    for epoch in range(args.epochs):
        train_one_epoch(train_loader, model, criterion, optimizer, epoch)
        lr_scheduler.step()
        test_model.load_state_dict(model.state_dict())
        print("epoch %d meta-test acc %.3f" % (epoch, evaluate(test_loader, test_model)))


if __name__ == "__main__":
    parser = argparse.ArgumentParser("pmf training", parents=[get_args_parser()])
    main(parser.parse_args([]))
