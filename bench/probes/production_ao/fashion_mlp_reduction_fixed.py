# expect: clean
# source: https://blog.csdn.net/cyj972628089/article/details/122732509
"""Fashion-MNIST style image classification with an MLP (d2l-style training loop).

A two-hidden-layer MLP with dropout is trained with SGD and a cosine
learning-rate schedule.  Per-sample losses are accumulated in an Accumulator
for epoch statistics, a per-class loss monitor callback tracks the hardest
classes, and test accuracy is reported after every epoch.  Images are seeded
synthetic 28x28 tensors with class-dependent patterns.
"""
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


@dataclass
class Config:
    num_inputs: int = 784
    num_hiddens1: int = 256
    num_hiddens2: int = 128
    num_outputs: int = 10
    dropout1: float = 0.2
    dropout2: float = 0.5
    batch_size: int = 64
    num_epochs: int = 2
    lr: float = 0.005
    weight_decay: float = 1e-4
    loss_reduction: str = 'none'
    n_train: int = 384
    n_test: int = 256
    seed: int = 0


class Accumulator:
    """For accumulating sums over `n` variables."""

    def __init__(self, n):
        self.data = [0.0] * n

    def add(self, *args):
        self.data = [a + float(b) for a, b in zip(self.data, args)]

    def reset(self):
        self.data = [0.0] * len(self.data)

    def __getitem__(self, idx):
        return self.data[idx]


class Timer:
    def __init__(self):
        self.times = []
        self.start()

    def start(self):
        self.tik = time.time()

    def stop(self):
        self.times.append(time.time() - self.tik)
        return self.times[-1]

    def sum(self):
        return sum(self.times)


def load_data_fashion_mnist(cfg):
    """Synthetic stand-in for torchvision.datasets.FashionMNIST."""
    g = torch.Generator().manual_seed(cfg.seed)
    prototypes = torch.rand(cfg.num_outputs, 1, 28, 28, generator=g)

    def make(n):
        y = torch.randint(0, cfg.num_outputs, (n,), generator=g)
        X = prototypes[y] + 0.3 * torch.randn(n, 1, 28, 28, generator=g)
        return TensorDataset(X.clamp(0, 1), y)

    return (DataLoader(make(cfg.n_train), cfg.batch_size, shuffle=True, generator=g),
            DataLoader(make(cfg.n_test), cfg.batch_size, shuffle=False))


class Net(nn.Module):
    def __init__(self, cfg):
        super(Net, self).__init__()
        self.num_inputs = cfg.num_inputs
        self.lin1 = nn.Linear(cfg.num_inputs, cfg.num_hiddens1)
        self.lin2 = nn.Linear(cfg.num_hiddens1, cfg.num_hiddens2)
        self.lin3 = nn.Linear(cfg.num_hiddens2, cfg.num_outputs)
        self.relu = nn.ReLU()
        self.dropout1 = nn.Dropout(cfg.dropout1)
        self.dropout2 = nn.Dropout(cfg.dropout2)

    def forward(self, X):
        H1 = self.relu(self.lin1(X.reshape((-1, self.num_inputs))))
        H1 = self.dropout1(H1)
        H2 = self.relu(self.lin2(H1))
        H2 = self.dropout2(H2)
        return self.lin3(H2)


def init_weights(m):
    if type(m) == nn.Linear:
        nn.init.normal_(m.weight, std=0.01)
        nn.init.zeros_(m.bias)


def build_loss(cfg):
    # per-example losses are kept for the statistics and the class monitor
    return nn.CrossEntropyLoss(reduction=cfg.loss_reduction)


def accuracy(y_hat, y):
    if len(y_hat.shape) > 1 and y_hat.shape[1] > 1:
        y_hat = y_hat.argmax(axis=1)
    cmp = y_hat.type(y.dtype) == y
    return float(cmp.type(y.dtype).sum())


class PerClassLossMonitor:
    """Callback tracking the mean loss of every class over an epoch."""

    def __init__(self, num_classes):
        self.sums = np.zeros(num_classes)
        self.counts = np.zeros(num_classes)

    def on_batch_end(self, per_example_loss, y):
        l = per_example_loss.detach().numpy()
        np.add.at(self.sums, y.numpy(), l)
        np.add.at(self.counts, y.numpy(), 1)

    def on_epoch_end(self, epoch):
        means = self.sums / np.maximum(self.counts, 1)
        hardest = np.argsort(-means)[:3]
        print(f'epoch {epoch + 1}: hardest classes {hardest.tolist()}')
        self.sums[:] = 0
        self.counts[:] = 0


class Trainer:
    def __init__(self, cfg, net, callbacks=()):
        self.cfg = cfg
        self.net = net
        self.loss = build_loss(cfg)
        decay, no_decay = [], []
        for name, p in net.named_parameters():
            (no_decay if name.endswith('bias') else decay).append(p)
        self.updater = torch.optim.SGD([{'params': decay, 'weight_decay': cfg.weight_decay},
                                        {'params': no_decay, 'weight_decay': 0.0}], lr=cfg.lr)
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.updater, T_max=cfg.num_epochs)
        self.callbacks = list(callbacks)
        self.timer = Timer()

    def train_step(self, X, y, metric):
        y_hat = self.net(X)
        l = self.loss(y_hat, y)
        self.updater.zero_grad()
        l.sum().backward()
        self.updater.step()
        metric.add(float(l.sum()), accuracy(y_hat, y), y.numel())
        for cb in self.callbacks:
            cb.on_batch_end(l, y)

    def train_epoch(self, train_iter):
        self.net.train()
        metric = Accumulator(3)
        for X, y in train_iter:
            self.train_step(X, y, metric)
        return metric[0] / metric[2], metric[1] / metric[2]

    def evaluate(self, data_iter):
        self.net.eval()
        metric = Accumulator(2)
        with torch.no_grad():
            for X, y in data_iter:
                metric.add(accuracy(self.net(X), y), y.numel())
        return metric[0] / metric[1]

    def fit(self, train_iter, test_iter):
        for epoch in range(self.cfg.num_epochs):
            self.timer.start()
            train_loss, train_acc = self.train_epoch(train_iter)
            self.scheduler.step()
            test_acc = self.evaluate(test_iter)
            self.timer.stop()
            for cb in self.callbacks:
                cb.on_epoch_end(epoch)
            print(f'epoch {epoch + 1}, loss {train_loss:.3f}, train acc {train_acc:.3f}, '
                  f'test acc {test_acc:.3f}, {self.timer.sum():.1f} sec')
        return test_acc


def main():
    cfg = Config()
    torch.manual_seed(cfg.seed)
    train_iter, test_iter = load_data_fashion_mnist(cfg)
    net = Net(cfg)
    net.apply(init_weights)
    trainer = Trainer(cfg, net, callbacks=[PerClassLossMonitor(cfg.num_outputs)])
    final_acc = trainer.fit(train_iter, test_iter)
    print(f'final test acc {final_acc:.3f}')


if __name__ == '__main__':
    main()
