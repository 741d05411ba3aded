# expect: no_grad_fn
# source: https://github.com/yaoyao-liu/e3bm/issues/4
"""Pre-training phase of E3BM (Learning E^3 Bayesian Models for few-shot
classification): a backbone plus a global linear classifier is pre-trained on
all base classes; after each epoch the backbone is validated on N-way K-shot
episodes by fitting a cosine base learner with a few inner gradient steps.

Synthetic class-dependent images replace mini-ImageNet; the encoder is a small
conv net.  The same MetaModel class also carries the hyperprior networks used
in the later meta-train phase.
"""
import argparse
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument('--way', type=int, default=5)
    parser.add_argument('--shot', type=int, default=1)
    parser.add_argument('--query', type=int, default=3)
    parser.add_argument('--num_class', type=int, default=12)
    parser.add_argument('--max_epoch', type=int, default=3)
    parser.add_argument('--val_epoch', type=int, default=1)
    parser.add_argument('--num_val_episodes', type=int, default=4)
    parser.add_argument('--pre_batch_size', type=int, default=32)
    parser.add_argument('--pre_lr', type=float, default=0.05)
    parser.add_argument('--pre_step_size', type=int, default=2)
    parser.add_argument('--pre_gamma', type=float, default=0.5)
    parser.add_argument('--base_lr', type=float, default=0.1)
    parser.add_argument('--base_epoch', type=int, default=3)
    parser.add_argument('--temperature', type=float, default=12.5)
    parser.add_argument('--hyperprior_init_mode', type=str, default='LP')
    parser.add_argument('--hyperprior_combination_softweight', type=float, default=1e-4)
    parser.add_argument('--hyperprior_basestep_softweight', type=float, default=1e-4)
    parser.add_argument('--num_gpu', type=int, default=1)
    parser.add_argument('--seed', type=int, default=0)
    return parser.parse_args(argv)


class Averager():
    def __init__(self):
        self.n = 0
        self.v = 0

    def add(self, x):
        self.v = (self.v * self.n + x) / (self.n + 1)
        self.n += 1

    def item(self):
        return self.v


def count_acc(logits, label):
    pred = F.softmax(logits, dim=1).argmax(dim=1)
    return (pred == label).type(torch.FloatTensor).mean().item()


class ConvEncoder(nn.Module):
    def __init__(self, z_dim=32):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, z_dim, 3, padding=1), nn.BatchNorm2d(z_dim), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1))

    def forward(self, x):
        return self.layers(x).flatten(1)


class BaseLearner(nn.Module):
    def __init__(self, args, z_dim):
        super().__init__()
        self.args = args
        self.z_dim = z_dim
        self.vars = nn.ParameterList()
        self.fc1_w = nn.Parameter(torch.ones([self.args.way, self.z_dim]))
        torch.nn.init.kaiming_normal_(self.fc1_w)
        self.vars.append(self.fc1_w)

    def forward(self, input_x, the_vars=None):
        if the_vars is None:
            the_vars = self.vars
        fc1_w = the_vars[0]
        return F.linear(F.normalize(input_x, p=2, dim=1), F.normalize(fc1_w, p=2, dim=1))


class HyperpriorCombination(nn.Module):
    def __init__(self, args, update_step, z_dim):
        super().__init__()
        self.hyperprior_initialization_vars = nn.ParameterList(
            [nn.Parameter(torch.FloatTensor([1.0 / update_step])) for _ in range(update_step)])
        self.fc_w = nn.Parameter(torch.zeros(update_step, z_dim * 2))
        self.fc_b = nn.Parameter(torch.zeros(update_step))
        self.hyperprior_softweight = args.hyperprior_combination_softweight

    def forward(self, input_x, grad, step_idx):
        net = torch.cat((input_x.mean(dim=0), grad[0].mean(dim=0)), 0)
        net = F.linear(net, self.fc_w, self.fc_b)[step_idx]
        return self.hyperprior_initialization_vars[step_idx] + self.hyperprior_softweight * net


class HyperpriorBasestep(HyperpriorCombination):
    def __init__(self, args, update_step, update_lr, z_dim):
        super().__init__(args, update_step, z_dim)
        for p in self.hyperprior_initialization_vars:
            p.data.fill_(update_lr)
        self.hyperprior_softweight = args.hyperprior_basestep_softweight


class MetaModel(nn.Module):
    def __init__(self, args, mode='meta'):
        super().__init__()
        self.args = args
        self.mode = mode
        self.z_dim = 32
        self.encoder = ConvEncoder(self.z_dim)
        self.base_learner = BaseLearner(args, self.z_dim)
        self.update_lr = self.args.base_lr
        self.update_step = self.args.base_epoch
        self.label_shot = torch.arange(self.args.way).repeat(self.args.shot).type(torch.LongTensor)
        if self.mode == 'pre':
            self.fc = nn.Sequential(nn.Linear(self.z_dim, self.args.num_class))
        if self.mode == 'meta':
            self.hyperprior_combination_model = HyperpriorCombination(args, self.update_step, self.z_dim)
            self.hyperprior_basestep_model = HyperpriorBasestep(args, self.update_step, self.update_lr, self.z_dim)

    def forward(self, inputs):
        if self.mode == 'pre':
            return self.pretrain_forward(inputs)
        elif self.mode == 'meta':
            data_shot, data_query = inputs
            return self.meta_forward(data_shot, data_query)
        raise ValueError('Please set the correct mode')

    def pretrain_forward(self, input):
        return self.fc(self.encoder(input))

    def normalize_feature(self, x):
        return x - x.mean(-1).unsqueeze(-1)

    def fusion(self, embedding):
        return embedding.view(self.args.shot, self.args.way, -1).mean(0)

    def _episode_embeddings(self, data_shot, data_query):
        embedding_query = self.normalize_feature(self.encoder(data_query.squeeze(0)))
        embedding_shot = self.normalize_feature(self.encoder(data_shot.squeeze(0)))
        with torch.no_grad():
            proto = embedding_shot if self.args.shot == 1 else self.fusion(embedding_shot)
            self.base_learner.fc1_w.data = proto
        return embedding_shot, embedding_query

    def meta_forward(self, data_shot, data_query):
        embedding_shot, embedding_query = self._episode_embeddings(data_shot, data_query)
        fast_weights = self.base_learner.vars
        logits_q = self.base_learner(embedding_query, fast_weights)
        total_logits = 0.0 * logits_q
        for k in range(0, self.update_step):
            logits = self.base_learner(embedding_shot, fast_weights) * self.args.temperature
            loss = F.cross_entropy(logits, self.label_shot)
            grad = torch.autograd.grad(loss, fast_weights)  # raises
            generated_combination_weights = self.hyperprior_combination_model(embedding_shot, grad, k)
            generated_basestep_weights = self.hyperprior_basestep_model(embedding_shot, grad, k)
            fast_weights = list(map(lambda p: p[1] - generated_basestep_weights * p[0], zip(grad, fast_weights)))
            logits_q = self.base_learner(embedding_query, fast_weights) * self.args.temperature
            total_logits += generated_combination_weights * logits_q
        return total_logits

    def preval_forward(self, data_shot, data_query):
        embedding_shot, embedding_query = self._episode_embeddings(data_shot, data_query)
        fast_weights = self.base_learner.vars
        logits_q = self.base_learner(embedding_query, fast_weights)
        total_logits = 0.0 * logits_q
        for k in range(0, self.update_step):
            logits = self.base_learner(embedding_shot, fast_weights) * self.args.temperature
            loss = F.cross_entropy(logits, self.label_shot)
            grad = torch.autograd.grad(loss, fast_weights)
            fast_weights = list(map(lambda p: p[1] - 0.1 * p[0], zip(grad, fast_weights)))
            logits_q = self.base_learner(embedding_query, fast_weights) * self.args.temperature
            total_logits += logits_q
        return total_logits


class SyntheticFewShot:
    """Class-conditional 3x16x16 images; a fixed random template per class plus noise."""
    def __init__(self, num_class, per_class, seed):
        g = torch.Generator().manual_seed(seed)
        self.templates = torch.randn(num_class, 3, 16, 16, generator=g)
        self.data = torch.cat([self.templates[c] + 0.8 * torch.randn(per_class, 3, 16, 16, generator=g)
                               for c in range(num_class)])
        self.label = torch.arange(num_class).repeat_interleave(per_class)
        self.per_class = per_class

    def batches(self, batch_size):
        perm = torch.randperm(len(self.label))
        for i in range(0, len(perm) - batch_size + 1, batch_size):
            idx = perm[i:i + batch_size]
            yield self.data[idx], self.label[idx]

    def episodes(self, n_episodes, way, n_per):
        """CategoriesSampler: shot+query images of `way` classes, ordered shot-major like the original."""
        for _ in range(n_episodes):
            classes = torch.randperm(len(self.templates))[:way]
            picks = [c * self.per_class + torch.randperm(self.per_class)[:n_per] for c in classes]
            idx = torch.stack(picks).t().reshape(-1)
            yield self.data[idx], self.label[idx]


class MetaTrainer(object):
    def __init__(self, args):
        self.args = args
        self.train_set = SyntheticFewShot(args.num_class, 24, seed=args.seed)
        self.val_set = SyntheticFewShot(8, 10, seed=args.seed + 1)
        self.model = MetaModel(args, mode='pre')
        self.optimizer = torch.optim.SGD([
            {'params': self.model.encoder.parameters(), 'lr': args.pre_lr},
            {'params': self.model.fc.parameters(), 'lr': args.pre_lr}],
            momentum=0.9, nesterov=True, weight_decay=0.0005)
        self.lr_scheduler = torch.optim.lr_scheduler.StepLR(
            self.optimizer, step_size=args.pre_step_size, gamma=args.pre_gamma)

    def train_step(self, data, train_label):
        logits = self.model(data)
        loss = F.cross_entropy(logits, train_label)
        acc = count_acc(logits, train_label)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item(), acc

    def evaluate(self, label):
        model, args = self.model, self.args
        vl, va = Averager(), Averager()
        with torch.no_grad():
            for data, _ in self.val_set.episodes(args.num_val_episodes, args.way, args.shot + args.query):
                p = args.shot * args.way
                data_shot, data_query = data[:p], data[p:]
                data_shot = data_shot.unsqueeze(0).repeat(args.num_gpu, 1, 1, 1, 1)
                logits = model((data_shot, data_query))
                loss = F.cross_entropy(logits, label)
                vl.add(loss.item())
                va.add(count_acc(logits, label))
        return vl.item(), va.item()

    def pre_train(self):
        args = self.args
        trlog = {'train_loss': [], 'val_loss': [], 'train_acc': [], 'val_acc': [],
                 'max_acc': 0.0, 'max_acc_epoch': 0}
        label = torch.arange(args.way).repeat(args.query).type(torch.LongTensor)
        for epoch in range(1, args.max_epoch + 1):
            start_time = time.time()
            self.model = self.model.train()
            self.model.mode = 'pre'
            tl, ta = Averager(), Averager()
            for data, train_label in self.train_set.batches(args.pre_batch_size):
                loss, acc = self.train_step(data, train_label)
                tl.add(loss)
                ta.add(acc)

            self.model = self.model.eval()
            self.model.mode = 'meta'
            if epoch < args.val_epoch:
                vl, va = 0, 0
            else:
                vl, va = self.evaluate(label)

            if va >= trlog['max_acc']:
                print('********* New best model!!! *********')
                trlog['max_acc'], trlog['max_acc_epoch'] = va, epoch
            for key, val in (('train_loss', tl.item()), ('train_acc', ta.item()), ('val_loss', vl), ('val_acc', va)):
                trlog[key].append(val)
            print('Epoch {}, train loss={:.4f} acc={:.4f}, val loss={:.4f} acc={:.4f} ({:.1f}s)'.format(
                epoch, tl.item(), ta.item(), vl, va, time.time() - start_time))
            self.lr_scheduler.step()
        print('Best epoch {}, best val acc={:.4f}'.format(trlog['max_acc_epoch'], trlog['max_acc']))
        return trlog


def main():
    args = get_args([])
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    trainer = MetaTrainer(args)
    trainer.pre_train()


if __name__ == '__main__':
    main()
