# expect: clean
# source: https://github.com/dasguptar/treelstm.pytorch/pull/26
"""Child-Sum Tree-LSTM for sentence-pair semantic relatedness (SICK-style).

Each sentence is a dependency tree; a Child-Sum Tree-LSTM encodes both trees,
a similarity module combines the two root states (|l - r| and l * r) and predicts
a distribution over the 1..5 relatedness scale, trained with KL divergence.
Word embeddings are initialised from "pretrained" vectors (synthetic here) and
are fine-tuned unless --freeze_embed is given.
"""
import argparse
import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F


def parse_args():
    p = argparse.ArgumentParser(description="Tree-LSTM semantic relatedness")
    p.add_argument("--vocab_size", type=int, default=60)
    p.add_argument("--input_dim", type=int, default=24)
    p.add_argument("--mem_dim", type=int, default=32)
    p.add_argument("--hidden_dim", type=int, default=16)
    p.add_argument("--num_classes", type=int, default=5)
    p.add_argument("--n_pairs", type=int, default=24)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batchsize", type=int, default=8)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--wd", type=float, default=1e-4)
    p.add_argument("--sparse", action="store_true")
    p.add_argument("--freeze_embed", action="store_true")
    p.add_argument("--seed", type=int, default=123)
    return p.parse_args([])


class Tree:
    def __init__(self):
        self.parent = None
        self.num_children = 0
        self.children = []
        self.idx = None

    def add_child(self, child):
        child.parent = self
        self.num_children += 1
        self.children.append(child)

    def size(self):
        return 1 + sum(c.size() for c in self.children)


class ChildSumTreeLSTM(nn.Module):
    def __init__(self, in_dim, mem_dim):
        super().__init__()
        self.in_dim, self.mem_dim = in_dim, mem_dim
        self.ioux = nn.Linear(in_dim, 3 * mem_dim)
        self.iouh = nn.Linear(mem_dim, 3 * mem_dim)
        self.fx = nn.Linear(in_dim, mem_dim)
        self.fh = nn.Linear(mem_dim, mem_dim)

    def node_forward(self, inputs, child_c, child_h):
        child_h_sum = torch.sum(child_h, dim=0, keepdim=True)
        iou = self.ioux(inputs) + self.iouh(child_h_sum)
        i, o, u = torch.split(iou, iou.size(1) // 3, dim=1)
        i, o, u = torch.sigmoid(i), torch.sigmoid(o), torch.tanh(u)
        f = torch.sigmoid(self.fh(child_h) + self.fx(inputs).repeat(len(child_h), 1))
        fc = torch.mul(f, child_c)
        c = torch.mul(i, u) + torch.sum(fc, dim=0, keepdim=True)
        h = torch.mul(o, torch.tanh(c))
        return c, h

    def forward(self, tree, inputs):
        for child in tree.children:
            self.forward(child, inputs)
        if tree.num_children == 0:
            child_c = inputs[0].detach().new_zeros(1, self.mem_dim)
            child_h = inputs[0].detach().new_zeros(1, self.mem_dim)
        else:
            child_c = torch.cat([x.state[0] for x in tree.children], dim=0)
            child_h = torch.cat([x.state[1] for x in tree.children], dim=0)
        tree.state = self.node_forward(inputs[tree.idx].unsqueeze(0), child_c, child_h)
        return tree.state


class Similarity(nn.Module):
    def __init__(self, mem_dim, hidden_dim, num_classes):
        super().__init__()
        self.wh = nn.Linear(2 * mem_dim, hidden_dim)
        self.wp = nn.Linear(hidden_dim, num_classes)

    def forward(self, lvec, rvec):
        mult_dist = torch.mul(lvec, rvec)
        abs_dist = torch.abs(torch.add(lvec, -rvec))
        vec_dist = torch.cat((mult_dist, abs_dist), 1)
        out = torch.sigmoid(self.wh(vec_dist))
        return F.log_softmax(self.wp(out), dim=1)


class SimilarityTreeLSTM(nn.Module):
    def __init__(self, vocab_size, in_dim, mem_dim, hidden_dim, num_classes, sparsity, freeze, init_emb=None):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, in_dim, padding_idx=0, sparse=sparsity)
        if freeze:
            self.emb.weight.requires_grad = False
        if init_emb is not None:
            with torch.no_grad():
                self.emb.weight.copy_(init_emb)
        self.childsumtreelstm = ChildSumTreeLSTM(in_dim, mem_dim)
        self.similarity = Similarity(mem_dim, hidden_dim, num_classes)

    def forward(self, ltree, linputs, rtree, rinputs):
        linputs = self.emb(linputs)
        rinputs = self.emb(rinputs)
        lstate, lhidden = self.childsumtreelstm(ltree, linputs)
        rstate, rhidden = self.childsumtreelstm(rtree, rinputs)
        return self.similarity(lstate, rstate)


def random_tree(n_tokens, rng):
    nodes = [Tree() for _ in range(n_tokens)]
    for i, node in enumerate(nodes):
        node.idx = i
    root = rng.randrange(n_tokens)
    order = [root] + [i for i in range(n_tokens) if i != root]
    for k in range(1, n_tokens):
        nodes[order[rng.randrange(k)]].add_child(nodes[order[k]])
    return nodes[root]


def map_label_to_target(label, num_classes):
    target = torch.zeros(1, num_classes)
    ceil, floor = int(math.ceil(label)), int(math.floor(label))
    if ceil == floor:
        target[0, floor - 1] = 1
    else:
        target[0, floor - 1] = ceil - label
        target[0, ceil - 1] = label - floor
    return target


def build_dataset(args, rng, g):
    data = []
    for _ in range(args.n_pairs):
        ln, rn = rng.randint(3, 7), rng.randint(3, 7)
        lsent = torch.randint(1, args.vocab_size, (ln,), generator=g)
        rsent = torch.randint(1, args.vocab_size, (rn,), generator=g)
        overlap = len(set(lsent.tolist()) & set(rsent.tolist())) / min(ln, rn)
        label = 1.0 + 4.0 * min(1.0, overlap + 0.3 * rng.random())
        data.append((random_tree(ln, rng), lsent, random_tree(rn, rng), rsent, label))
    return data


class Trainer:
    def __init__(self, args, model, criterion, optimizer):
        self.args, self.model, self.criterion, self.optimizer = args, model, criterion, optimizer
        self.epoch = 0

    def train(self, dataset):
        self.model.train()
        self.optimizer.zero_grad()
        total_loss = 0.0
        for idx, (ltree, linput, rtree, rinput, label) in enumerate(dataset):
            target = map_label_to_target(label, self.args.num_classes)
            output = self.model(ltree, linput, rtree, rinput)
            loss = self.criterion(output, target)
            total_loss += loss.item()
            loss.backward()
            if (idx + 1) % self.args.batchsize == 0:
                self.optimizer.step()
                self.optimizer.zero_grad()
        self.epoch += 1
        return total_loss / len(dataset)

    def test(self, dataset):
        self.model.eval()
        preds = []
        with torch.no_grad():
            for ltree, linput, rtree, rinput, _ in dataset:
                output = self.model(ltree, linput, rtree, rinput)
                preds.append(torch.dot(torch.arange(1, self.args.num_classes + 1.0), output.exp().squeeze(0)))
        return torch.stack(preds)


def main():
    args = parse_args()
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed)
    train_set = build_dataset(args, rng, g)
    dev_set = build_dataset(args, rng, g)[:8]
    emb = torch.empty(args.vocab_size, args.input_dim).normal_(0, 0.05)
    emb[0].zero_()
    model = SimilarityTreeLSTM(args.vocab_size, args.input_dim, args.mem_dim, args.hidden_dim,
                               args.num_classes, args.sparse, args.freeze_embed, init_emb=emb)
    criterion = nn.KLDivLoss(reduction="batchmean")
    optimizer = torch.optim.Adagrad(filter(lambda p: p.requires_grad, model.parameters()),
                                    lr=args.lr, weight_decay=args.wd)
    trainer = Trainer(args, model, criterion, optimizer)
    for epoch in range(args.epochs):
        train_loss = trainer.train(train_set)
        preds = trainer.test(dev_set)
        gold = torch.tensor([d[4] for d in dev_set])
        pearson = torch.corrcoef(torch.stack([preds, gold]))[0, 1].item()
        print(f"==> Epoch {epoch}, Train Loss: {train_loss:.4f}  Dev Pearson: {pearson:.4f}")


if __name__ == "__main__":
    main()
