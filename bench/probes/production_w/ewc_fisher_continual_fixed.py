# expect: clean
# source: https://github.com/shivamsaboo17/Overcoming-Catastrophic-forgetting-in-Neural-Networks/issues/2
"""Elastic Weight Consolidation for class-incremental continual learning.

Follows elastic_weight_consolidation.py of the original repository: after
each task the diagonal Fisher information of the log-likelihood is estimated
on a few batches of that task and stored, together with the current
parameter values, as buffers on the model; later tasks add the quadratic
consolidation penalty to the cross-entropy.  A small residual CNN backbone
with a linear head is trained on a stream of synthetic image tasks; a
ContinualTrainer drives tasks, evaluates on all tasks seen so far and calls
registered callbacks.
"""
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch import autograd
from torch.utils.data import DataLoader, TensorDataset


class ResBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(x + self.bn2(self.conv2(out)))


class SmallResNet(nn.Module):
    def __init__(self, num_classes, width=8):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
            ResBlock(width), nn.MaxPool2d(2), ResBlock(width),
            nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(width, num_classes)

    def forward(self, x):
        return self.head(self.backbone(x))


class ElasticWeightConsolidation:

    def __init__(self, model, crit, lr=0.001, weight=1000000):
        self.model = model
        self.weight = weight
        self.crit = crit
        self.optimizer = optim.Adam(self.model.parameters(), lr)

    def _update_mean_params(self):
        for param_name, param in self.model.named_parameters():
            _buff_param_name = param_name.replace('.', '__')
            self.model.register_buffer(_buff_param_name + '_estimated_mean', param.data.clone())

    def _update_fisher_params(self, current_ds, batch_size, num_batch):
        dl = DataLoader(current_ds, batch_size, shuffle=True)
        log_likelihood, n_batches = 0.0, 0
        for i, (input, target) in enumerate(dl):
            if i > num_batch:
                break
            output = F.log_softmax(self.model(input), dim=1)
            log_likelihood = log_likelihood + output[:, target].mean()
            n_batches += 1
        log_likelihood = log_likelihood / n_batches
        grad_log_liklihood = autograd.grad(log_likelihood, self.model.parameters())
        _buff_param_names = [param[0].replace('.', '__') for param in self.model.named_parameters()]
        for _buff_param_name, param in zip(_buff_param_names, grad_log_liklihood):
            self.model.register_buffer(_buff_param_name + '_estimated_fisher', param.data.clone() ** 2)

    def register_ewc_params(self, dataset, batch_size, num_batches):
        self._update_fisher_params(dataset, batch_size, num_batches)
        self._update_mean_params()

    def _compute_consolidation_loss(self, weight):
        try:
            losses = []
            for param_name, param in self.model.named_parameters():
                _buff_param_name = param_name.replace('.', '__')
                estimated_mean = getattr(self.model, '{}_estimated_mean'.format(_buff_param_name))
                estimated_fisher = getattr(self.model, '{}_estimated_fisher'.format(_buff_param_name))
                losses.append((estimated_fisher * (param - estimated_mean) ** 2).sum())
            return (weight / 2) * sum(losses)
        except AttributeError:
            return 0

    def forward_backward_update(self, input, target):
        output = self.model(input)
        loss = self._compute_consolidation_loss(self.weight) + self.crit(output, target)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()


def make_task_stream(cfg):
    g = torch.Generator().manual_seed(cfg.seed)
    tasks = []
    for t in range(cfg.num_tasks):
        classes = list(range(t * cfg.classes_per_task, (t + 1) * cfg.classes_per_task))
        protos = torch.randn(len(classes), 1, cfg.img, cfg.img, generator=g)
        labels = torch.tensor(classes).repeat_interleave(cfg.samples_per_class)
        x = protos.repeat_interleave(cfg.samples_per_class, 0)
        x = x + 0.3 * torch.randn(x.shape, generator=g)
        tasks.append(TensorDataset(x, labels))
    return tasks


class ContinualTrainer:
    def __init__(self, cfg):
        self.cfg = cfg
        n_classes = cfg.num_tasks * cfg.classes_per_task
        self.model = SmallResNet(n_classes, cfg.width)
        self.ewc = ElasticWeightConsolidation(self.model, crit=nn.CrossEntropyLoss(),
                                              lr=cfg.lr, weight=cfg.ewc_weight)
        self.tasks = make_task_stream(cfg)
        self.callbacks = []
        self.history = {}

    @property
    def seen_tasks(self):
        return len(self.history)

    def train_step(self, input, target):
        self.model.train()
        return self.ewc.forward_backward_update(input, target)

    @torch.no_grad()
    def evaluate(self, upto):
        self.model.eval()
        accs = []
        for ds in self.tasks[:upto]:
            x, y = ds.tensors
            accs.append((self.model(x).argmax(1) == y).float().mean().item())
        return accs

    def train_task(self, task_id):
        ds = self.tasks[task_id]
        loader = DataLoader(ds, batch_size=self.cfg.batch_size, shuffle=True)
        for epoch in range(self.cfg.epochs_per_task):
            for input, target in loader:
                loss = self.train_step(input, target)
        self.ewc.register_ewc_params(ds, self.cfg.fisher_batch_size, self.cfg.fisher_num_batches)
        self.history[task_id] = self.evaluate(task_id + 1)
        for cb in self.callbacks:
            cb(task_id, loss, self.history[task_id])

    def run(self):
        for task_id in range(self.cfg.num_tasks):
            self.train_task(task_id)
        return self.history


def print_callback(task_id, loss, accs):
    print("task %d  last loss %.4f  accs %s" % (task_id, loss, [round(a, 3) for a in accs]))


def main():
    torch.manual_seed(0)
    cfg = SimpleNamespace(seed=0, num_tasks=2, classes_per_task=2, samples_per_class=16, img=8,
                          width=8, lr=1e-3, ewc_weight=1e4, batch_size=8, epochs_per_task=1,
                          fisher_batch_size=8, fisher_num_batches=2)
    trainer = ContinualTrainer(cfg)
    trainer.callbacks.append(print_callback)
    trainer.run()


if __name__ == "__main__":
    main()
