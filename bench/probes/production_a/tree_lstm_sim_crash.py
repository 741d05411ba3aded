# expect: leaf_inplace
# source: https://github.com/dasguptar/treelstm.pytorch/pull/26
"""Child-sum Tree-LSTM for sentence relatedness (SICK-style) on synthetic parse trees."""
import argparse
import math
import random
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD = 0


class Tree:
    def __init__(self, idx):
        self.idx = idx
        self.children = []
        self.state = None

    def add_child(self, child):
        self.children.append(child)

    def size(self):
        return 1 + sum(c.size() for c in self.children)


def random_tree(n_tokens, rng):
    nodes = [Tree(i) for i in range(n_tokens)]
    order = list(range(n_tokens))
    rng.shuffle(order)
    root = nodes[order[0]]
    for k in order[1:]:
        parent = nodes[order[rng.randrange(0, order.index(k))]]
        parent.add_child(nodes[k])
    return root


class ChildSumTreeLSTM(nn.Module):
    def __init__(self, in_dim, mem_dim):
        super().__init__()
        self.in_dim = in_dim
        self.mem_dim = mem_dim
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
        if not tree.children:
            child_c = inputs[0].new_zeros(1, self.mem_dim)
            child_h = inputs[0].new_zeros(1, self.mem_dim)
        else:
            child_c = torch.cat([c.state[0] for c in tree.children], dim=0)
            child_h = torch.cat([c.state[1] for c in tree.children], dim=0)
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
    def __init__(self, vocab_size, in_dim, mem_dim, hidden_dim, num_classes,
                 sparsity, freeze, init_emb=None):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, in_dim, padding_idx=PAD, sparse=sparsity)
        if freeze:
            self.emb.weight.requires_grad = False
        if init_emb is not None:
            self.emb.weight.copy_(init_emb)  # raises
        self.childsumtreelstm = ChildSumTreeLSTM(in_dim, mem_dim)
        self.similarity = Similarity(mem_dim, hidden_dim, num_classes)

    def forward(self, ltree, linputs, rtree, rinputs):
        linputs = self.emb(linputs)
        rinputs = self.emb(rinputs)
        lstate, lhidden = self.childsumtreelstm(ltree, linputs)
        rstate, rhidden = self.childsumtreelstm(rtree, rinputs)
        return self.similarity(lstate, rstate)


def map_label_to_target(label, num_classes):
    target = torch.zeros(1, num_classes)
    ceil, floor = int(math.ceil(label)), int(math.floor(label))
    if ceil == floor:
        target[0, floor - 1] = 1
    else:
        target[0, floor - 1] = ceil - label
        target[0, ceil - 1] = label - floor
    return target


class Trainer:
    def __init__(self, args, model, criterion, optimizer):
        self.args = args
        self.model = model
        self.criterion = criterion
        self.optimizer = optimizer
        self.epoch = 0

    def train(self, dataset):
        self.model.train()
        self.optimizer.zero_grad()
        total_loss = 0.0
        indices = torch.randperm(len(dataset))
        for idx in range(len(dataset)):
            ltree, linput, rtree, rinput, label = dataset[indices[idx]]
            target = map_label_to_target(label, self.args.num_classes)
            output = self.model(ltree, linput, rtree, rinput)
            loss = self.criterion(output, target)
            total_loss += loss.item()
            loss.backward()
            if idx % self.args.batchsize == 0 and idx > 0:
                self.optimizer.step()
                self.optimizer.zero_grad()
        self.epoch += 1
        return total_loss / len(dataset)

    def test(self, dataset):
        self.model.eval()
        preds = torch.zeros(len(dataset))
        scale = torch.arange(1, self.args.num_classes + 1, dtype=torch.float)
        with torch.no_grad():
            for idx in range(len(dataset)):
                ltree, linput, rtree, rinput, _ = dataset[idx]
                output = self.model(ltree, linput, rtree, rinput)
                preds[idx] = torch.dot(scale, output.squeeze().exp())
        return preds


def make_dataset(n_pairs, vocab_size, rng):
    data = []
    for _ in range(n_pairs):
        ln, rn = rng.randint(3, 8), rng.randint(3, 8)
        linput = torch.randint(1, vocab_size, (ln,))
        rinput = torch.randint(1, vocab_size, (rn,))
        label = rng.uniform(1.0, 5.0)
        data.append((random_tree(ln, rng), linput, random_tree(rn, rng), rinput, label))
    return data


def main():
    args = argparse.Namespace(vocab_size=60, input_dim=16, mem_dim=24, hidden_dim=16,
                              num_classes=5, sparse=False, freeze_embed=False, lr=0.05,
                              wd=1e-4, batchsize=5, epochs=2, seed=0, n_train=20, n_dev=8)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    train_set = make_dataset(args.n_train, args.vocab_size, rng)
    dev_set = make_dataset(args.n_dev, args.vocab_size, rng)
    emb = torch.empty(args.vocab_size, args.input_dim).normal_(0, 0.05)
    emb[PAD].zero_()
    model = SimilarityTreeLSTM(args.vocab_size, args.input_dim, args.mem_dim, args.hidden_dim,
                               args.num_classes, args.sparse, args.freeze_embed, init_emb=emb)
    criterion = nn.KLDivLoss(reduction="batchmean")
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adagrad(params, lr=args.lr, weight_decay=args.wd)
    trainer = Trainer(args, model, criterion, optimizer)
    gold = torch.tensor([ex[4] for ex in dev_set])
    for epoch in range(args.epochs):
        t0 = time.time()
        train_loss = trainer.train(train_set)
        preds = trainer.test(dev_set)
        mse = F.mse_loss(preds, gold).item()
        print("epoch %d  train loss %.4f  dev mse %.4f  (%.2fs)" % (epoch, train_loss, mse, time.time() - t0))


if __name__ == "__main__":
    main()
