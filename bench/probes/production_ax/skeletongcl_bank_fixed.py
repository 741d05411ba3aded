# expect: clean
# source: https://github.com/OliverHxh/SkeletonGCL/issues/6
"""Skeleton-based action recognition with graph contrastive learning (SkeletonGCL style).

A CTR-GCN-like adaptive-graph network classifies synthetic skeleton clips; every block also
returns its sample-specific topology, which an InfoNCEGraph loss with a memory bank of graph
embeddings contrasts across classes. A Processor drives warm-up LR, training and evaluation.
"""
import argparse
import math
import random
import time

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch import einsum
from torch.utils.data import DataLoader, Dataset


def init_seed(seed):
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def get_parser():
    parser = argparse.ArgumentParser(description='Skeleton Graph Contrastive Learning')
    parser.add_argument('--seed', type=int, default=1)
    parser.add_argument('--num-class', type=int, default=4)
    parser.add_argument('--num-point', type=int, default=10)
    parser.add_argument('--window-size', type=int, default=16)
    parser.add_argument('--num-samples', type=int, default=64)
    parser.add_argument('--batch-size', type=int, default=16)
    parser.add_argument('--base-lr', type=float, default=0.05)
    parser.add_argument('--step', type=int, nargs='+', default=[3])
    parser.add_argument('--lr-decay-rate', type=float, default=0.1)
    parser.add_argument('--warm-up-epoch', type=int, default=1)
    parser.add_argument('--weight-decay', type=float, default=4e-4)
    parser.add_argument('--nesterov', type=bool, default=True)
    parser.add_argument('--optimizer', default='SGD')
    parser.add_argument('--num-epoch', type=int, default=3)
    parser.add_argument('--contrast-layers', type=int, nargs='+', default=[1, 2])
    parser.add_argument('--positive-num', type=int, default=4)
    parser.add_argument('--negative-num', type=int, default=8)
    parser.add_argument('--temperature', type=float, default=0.8)
    return parser


class SyntheticSkeletonFeeder(Dataset):
    """N x C x T x V clips whose joint trajectories depend on the class."""

    def __init__(self, num_samples, num_class, window_size, num_point, seed):
        g = torch.Generator().manual_seed(seed)
        self.label = [i % num_class for i in range(num_samples)]
        base = torch.randn(num_class, 3, 1, num_point, generator=g)
        t = torch.linspace(0, 1, window_size).view(1, window_size, 1)
        data = []
        for lb in self.label:
            clip = base[lb] * torch.sin(2 * math.pi * (lb + 1) * t) + 0.3 * torch.randn(3, window_size, num_point, generator=g)
            data.append(clip)
        self.data = torch.stack(data)

    def __len__(self): return len(self.label)

    def __getitem__(self, index):
        return self.data[index], self.label[index], index

    def top_k(self, score, top_k):
        rank = score.argsort()
        return float(np.mean([l in rank[i, -top_k:] for i, l in enumerate(self.label)]))


def chain_adjacency(num_point):
    A = np.eye(num_point, dtype=np.float32)
    for i in range(num_point - 1):
        A[i, i + 1] = A[i + 1, i] = 1
    D = np.sum(A, 0)
    return A / D[None, :]


class CTRGC(nn.Module):
    """Channel-wise topology refinement: sample-specific graph from pooled features."""

    def __init__(self, in_channels, out_channels, rel_channels=8):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, rel_channels, 1)
        self.conv2 = nn.Conv2d(in_channels, rel_channels, 1)
        self.conv3 = nn.Conv2d(in_channels, out_channels, 1)
        self.conv4 = nn.Conv2d(rel_channels, out_channels, 1)

    def forward(self, x, A, alpha):
        x1, x2, x3 = self.conv1(x).mean(-2), self.conv2(x).mean(-2), self.conv3(x)
        rel = torch.tanh(x1.unsqueeze(-1) - x2.unsqueeze(-2))
        topo = self.conv4(rel) * alpha + A.unsqueeze(0).unsqueeze(0)
        out = einsum('ncuv,nctv->nctu', topo, x3)
        return out, topo.mean(1)


class TCN_GCN_unit(nn.Module):
    def __init__(self, in_channels, out_channels, A, stride=1):
        super().__init__()
        self.PA = nn.Parameter(torch.from_numpy(A.astype(np.float32)))
        self.alpha = nn.Parameter(torch.zeros(1))
        self.gcn = CTRGC(in_channels, out_channels)
        self.bn = nn.BatchNorm2d(out_channels)
        self.tcn = nn.Sequential(
            nn.Conv2d(out_channels, out_channels, (5, 1), padding=(2, 0), stride=(stride, 1)),
            nn.BatchNorm2d(out_channels))
        if in_channels == out_channels and stride == 1:
            self.residual = lambda x: x
        else:
            self.residual = nn.Sequential(nn.Conv2d(in_channels, out_channels, 1, stride=(stride, 1)),
                                          nn.BatchNorm2d(out_channels))
        self.relu = nn.ReLU()

    def forward(self, x):
        y, graph = self.gcn(x, self.PA, self.alpha)
        y = self.relu(self.bn(y))
        y = self.relu(self.tcn(y) + self.residual(x))
        return y, graph


class Model(nn.Module):
    def __init__(self, num_class, num_point, in_channels=3):
        super().__init__()
        A = chain_adjacency(num_point)
        self.data_bn = nn.BatchNorm1d(in_channels * num_point)
        self.l1 = TCN_GCN_unit(in_channels, 16, A)
        self.l2 = TCN_GCN_unit(16, 16, A)
        self.l3 = TCN_GCN_unit(16, 32, A, stride=2)
        self.fc = nn.Linear(32, num_class)

    def forward(self, x):
        N, C, T, V = x.size()
        x = self.data_bn(x.permute(0, 3, 1, 2).reshape(N, V * C, T))
        x = x.view(N, V, C, T).permute(0, 2, 3, 1).contiguous()
        graphs = []
        for layer in (self.l1, self.l2, self.l3):
            x, g = layer(x)
            graphs.append(g.reshape(N, -1))
        x = x.mean(-1).mean(-1)
        return self.fc(x), graphs


class InfoNCEGraph(nn.Module):
    def __init__(self, in_channels, out_channels=32, mem_size=64, positive_num=4, negative_num=8, T=0.8,
                 class_num=4, label_all=()):
        super().__init__()
        self.mem_size = mem_size
        self.positive_num = positive_num
        self.negative_num = negative_num
        self.T = T
        self.trans = nn.Linear(in_channels, out_channels)
        self.Bank = nn.Parameter(torch.zeros((mem_size, out_channels)), requires_grad=False)
        self.label_all = torch.tensor(label_all)
        nn.init.normal_(self.trans.weight, 0, math.sqrt(2. / class_num))
        nn.init.zeros_(self.trans.bias)
        self.bank_flag = nn.Parameter(torch.zeros(len(self.label_all)), requires_grad=False)
        self.cross_entropy = nn.CrossEntropyLoss()

    def forward(self, f, label, input_index):
        n, _ = f.size()
        f = self.trans(f)
        f_normed = f / f.norm(dim=-1, p=2, keepdim=True)
        self.Bank[input_index] = f_normed.detach()
        self.bank_flag[input_index] = 1

        all_pairs = einsum('n c, m c -> n m', f_normed, self.Bank.clone())
        bank_label = self.label_all.to(label.device)
        positive_mask = (label.view(n, 1) == bank_label.view(1, -1)).view(n, self.mem_size)
        negative_mask = (1 - positive_mask.float()) * self.bank_flag
        positive_mask = positive_mask * self.bank_flag

        combined_pairs_list = []
        for i in range(n):
            if positive_mask[i].sum() < self.positive_num or negative_mask[i].sum() < self.negative_num:
                continue
            positive_pairs = torch.masked_select(all_pairs[i], mask=positive_mask[i].bool())
            positive_hard = positive_pairs.sort(descending=False)[0][:self.positive_num].view(1, self.positive_num, 1)
            negative_pairs = torch.masked_select(all_pairs[i], mask=negative_mask[i].bool())
            negative_hard = negative_pairs.sort(descending=True)[0][:self.negative_num].view(1, 1, self.negative_num) \
                .expand(-1, self.positive_num, -1)
            idx = random.sample(list(range(len(negative_pairs))), k=self.negative_num)
            negative_random = negative_pairs[idx].view(1, 1, self.negative_num).expand(-1, self.positive_num, -1)
            hard2hard = torch.cat([positive_hard, negative_hard], -1).view(self.positive_num, -1)
            hard2random = torch.cat([positive_hard, negative_random], -1).view(self.positive_num, -1)
            combined_pairs_list.append(torch.cat([hard2hard, hard2random], 0))

        if len(combined_pairs_list) == 0:
            return torch.zeros(1, device=f.device)
        combined_pairs = torch.cat(combined_pairs_list, 0)
        combined_label = torch.zeros(combined_pairs.size(0), dtype=torch.long, device=f.device)
        return self.cross_entropy(combined_pairs / self.T, combined_label)


class Processor:
    def __init__(self, arg):
        self.arg = arg
        self.global_step, self.best_acc, self.best_acc_epoch = 0, 0, 0
        self.load_data()
        self.load_model()
        self.load_optimizer()

    def load_data(self):
        train = SyntheticSkeletonFeeder(self.arg.num_samples, self.arg.num_class, self.arg.window_size,
                                        self.arg.num_point, seed=self.arg.seed)
        test = SyntheticSkeletonFeeder(32, self.arg.num_class, self.arg.window_size, self.arg.num_point,
                                       seed=self.arg.seed + 1)
        self.data_loader = {
            'train': DataLoader(train, batch_size=self.arg.batch_size, shuffle=True, drop_last=True),
            'test': DataLoader(test, batch_size=32, shuffle=False),
        }

    def load_model(self):
        self.model = Model(self.arg.num_class, self.arg.num_point)
        self.loss = nn.CrossEntropyLoss()
        label_all = self.data_loader['train'].dataset.label
        self.graphContrast = InfoNCEGraph(in_channels=self.arg.num_point ** 2, mem_size=len(label_all),
                                          positive_num=self.arg.positive_num, negative_num=self.arg.negative_num,
                                          T=self.arg.temperature, class_num=self.arg.num_class, label_all=label_all)

    def load_optimizer(self):
        params = list(self.model.parameters()) + list(self.graphContrast.trans.parameters())
        if self.arg.optimizer == 'SGD':
            self.optimizer = optim.SGD(params, lr=self.arg.base_lr, momentum=0.9,
                                       nesterov=self.arg.nesterov, weight_decay=self.arg.weight_decay)
        else:
            raise ValueError()

    def adjust_learning_rate(self, epoch):
        if epoch < self.arg.warm_up_epoch:
            lr = self.arg.base_lr * (epoch + 1) / self.arg.warm_up_epoch
        else:
            lr = self.arg.base_lr * (self.arg.lr_decay_rate ** np.sum(epoch >= np.array(self.arg.step)))
        for param_group in self.optimizer.param_groups:
            param_group['lr'] = lr
        return lr

    def print_log(self, s):
        print('[ ' + time.strftime('%H:%M:%S') + ' ] ' + s)

    def graph_contrast_loss(self, graphs, label, index):
        contrast_loss = torch.zeros(1)
        for layer in self.arg.contrast_layers:
            contrast_loss = contrast_loss + self.graphContrast(graphs[layer], label, index)
        return contrast_loss

    def train(self, epoch):
        self.model.train()
        self.adjust_learning_rate(epoch)
        loss_value, contrast_loss_value, acc_value = [], [], []
        for batch_idx, (data, label, index) in enumerate(self.data_loader['train']):
            self.global_step += 1
            output, graphs = self.model(data.float())
            loss = self.loss(output, label)
            contrast_loss = self.graph_contrast_loss(graphs, label, index)
            if contrast_loss > 0:
                loss = loss + contrast_loss
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()

            loss_value.append(loss.item())
            contrast_loss_value.append(contrast_loss.item())
            acc_value.append((output.argmax(1) == label).float().mean().item())
        self.print_log('\tMean training loss: {:.4f}. Mean graph loss: {:.4f}. Mean training acc: {:.2f}%.'.format(
            np.mean(loss_value), np.mean(contrast_loss_value), np.mean(acc_value) * 100))

    def eval(self, epoch):
        self.model.eval()
        score_frag, loss_value = [], []
        for data, label, index in self.data_loader['test']:
            with torch.no_grad():
                output, _ = self.model(data.float())
                loss_value.append(self.loss(output, label.long()).item())
                score_frag.append(output.cpu().numpy())
        score = np.concatenate(score_frag)
        accuracy = self.data_loader['test'].dataset.top_k(score, 1)
        if accuracy > self.best_acc:
            self.best_acc, self.best_acc_epoch = accuracy, epoch + 1
        self.print_log('\tTop1: {:.2f}%. Mean test loss: {:.4f}.'.format(100 * accuracy, np.mean(loss_value)))

    def start(self):
        for epoch in range(self.arg.num_epoch):
            self.print_log('Training epoch: {}'.format(epoch + 1))
            self.train(epoch)
            self.eval(epoch)
        self.print_log(f'Best accuracy: {self.best_acc} (epoch {self.best_acc_epoch})')


def main():
    arg = get_parser().parse_args([])
    init_seed(arg.seed)
    Processor(arg).start()


if __name__ == '__main__':
    main()
