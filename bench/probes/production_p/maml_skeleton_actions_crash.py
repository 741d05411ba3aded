# expect: grad_unused
# source: https://github.com/tristandeleu/pytorch-maml/issues/13
"""Few-shot skeleton-based action recognition with MAML (pytorch-maml layout).

torchmeta-style MetaModules take an optional ``params`` dict so that the inner
loop can run the network on adapted (non-leaf) weights; ModelAgnosticMetaLearning
adapts on the support set for ``num_adaptation_steps`` and backpropagates the
query loss through the adaptation.
"""
import math
import re
from argparse import Namespace
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)


# ---------------------------------------------------------------- torchmeta-like modules
class MetaModule(nn.Module):
    def meta_named_parameters(self, prefix='', recurse=True):
        gen = self._named_members(
            lambda module: module._parameters.items() if isinstance(module, MetaModule) else [],
            prefix=prefix, recurse=recurse)
        for elem in gen:
            yield elem

    def get_subdict(self, params, key=None):
        if params is None:
            return None
        key_re = re.compile(r'^{0}\.(.+)'.format(re.escape(key)))
        return OrderedDict((key_re.sub(r'\1', k), value) for (k, value) in params.items()
                           if key_re.match(k) is not None)


class MetaLinear(nn.Linear, MetaModule):
    def forward(self, input, params=None):
        if params is None:
            params = OrderedDict(self.named_parameters())
        return F.linear(input, params['weight'], params.get('bias', None))


class MetaConv1d(nn.Conv1d, MetaModule):
    def forward(self, input, params=None):
        if params is None:
            params = OrderedDict(self.named_parameters())
        return F.conv1d(input, params['weight'], params.get('bias', None),
                        self.stride, self.padding, self.dilation, self.groups)


class MetaSequential(nn.Sequential, MetaModule):
    def forward(self, input, params=None):
        for name, module in self._modules.items():
            if isinstance(module, MetaModule):
                input = module(input, params=self.get_subdict(params, name))
            else:
                input = module(input)
        return input


def gradient_update_parameters(model, loss, params=None, step_size=0.5, first_order=False):
    if params is None:
        params = OrderedDict(model.meta_named_parameters())
    grads = torch.autograd.grad(loss, params.values(), create_graph=not first_order)  # raises
    updated_params = OrderedDict()
    for (name, param), grad in zip(params.items(), grads):
        updated_params[name] = param - step_size * grad
    return updated_params


# ---------------------------------------------------------------- model
def conv_block(in_channels, out_channels):
    return MetaSequential(OrderedDict([
        ('conv', MetaConv1d(in_channels, out_channels, kernel_size=3, padding=1)),
        ('norm', nn.GroupNorm(4, out_channels, affine=False)),
        ('relu', nn.ReLU()),
    ]))


class AttentivePool(MetaModule):
    """Scores every frame and returns the attention-weighted temporal average."""

    def __init__(self, channels):
        super().__init__()
        self.score = MetaLinear(channels, 1)

    def forward(self, x, params=None):
        h = x.transpose(1, 2)                       # (B, T, C)
        w = torch.softmax(self.score(h), dim=1)     # (B, T, 1)
        return (w * h).sum(1)


class SkeletonMetaNet(MetaModule):
    def __init__(self, in_channels, out_features, hidden_size=32):
        super().__init__()
        self.features = MetaSequential(OrderedDict([
            ('layer1', conv_block(in_channels, hidden_size)),
            ('layer2', conv_block(hidden_size, hidden_size)),
        ]))
        self.pool = AttentivePool(hidden_size)
        self.classifier = MetaLinear(hidden_size, out_features)

    def forward(self, inputs, params=None):
        x = self.features(inputs, params=self.get_subdict(params, 'features'))
        x = self.pool(x, params=self.get_subdict(params, 'pool'))
        return self.classifier(x, params=self.get_subdict(params, 'classifier'))


# ---------------------------------------------------------------- data
class SkeletonTasks:
    """N-way K-shot episodes of synthetic joint trajectories (T frames x J*3 coords)."""

    def __init__(self, num_ways, num_shots, num_queries, n_classes=30, joints=6, frames=24, seed=0):
        rng = np.random.RandomState(seed)
        self.num_ways, self.num_shots, self.num_queries = num_ways, num_shots, num_queries
        self.freq = rng.uniform(0.5, 3.0, size=(n_classes, joints * 3))
        self.phase = rng.uniform(0, 2 * math.pi, size=(n_classes, joints * 3))
        self.t = np.linspace(0, 2 * math.pi, frames)
        self.rng = rng

    def _clip(self, c):
        speed = self.rng.uniform(0.8, 1.2)
        x = np.sin(self.freq[c][:, None] * self.t[None] * speed + self.phase[c][:, None])
        return x + 0.3 * self.rng.randn(*x.shape)

    def sample_batch(self, batch_size):
        batch = {'train': ([], []), 'test': ([], [])}
        for _ in range(batch_size):
            classes = self.rng.choice(len(self.freq), self.num_ways, replace=False)
            for split, n in (('train', self.num_shots), ('test', self.num_queries)):
                xs = [self._clip(c) for c in classes for _ in range(n)]
                ys = [k for k in range(self.num_ways) for _ in range(n)]
                batch[split][0].append(torch.tensor(np.stack(xs), dtype=torch.float32))
                batch[split][1].append(torch.tensor(ys))
        return {k: (torch.stack(v[0]), torch.stack(v[1])) for k, v in batch.items()}


def compute_accuracy(logits, targets):
    with torch.no_grad():
        return torch.mean(logits.argmax(dim=1).eq(targets).float()).item()


# ---------------------------------------------------------------- MAML
class ModelAgnosticMetaLearning(object):
    def __init__(self, model, optimizer=None, step_size=0.1, first_order=False,
                 num_adaptation_steps=1, scheduler=None, loss_function=F.cross_entropy):
        self.model = model
        self.optimizer = optimizer
        self.step_size = step_size
        self.first_order = first_order
        self.num_adaptation_steps = num_adaptation_steps
        self.scheduler = scheduler
        self.loss_function = loss_function

    def get_outer_loss(self, batch):
        test_targets = batch['test'][1]
        num_tasks = test_targets.size(0)
        results = {'inner_losses': np.zeros((self.num_adaptation_steps, num_tasks), dtype=np.float32),
                   'outer_losses': np.zeros((num_tasks,), dtype=np.float32),
                   'accuracies_before': np.zeros((num_tasks,), dtype=np.float32),
                   'accuracies_after': np.zeros((num_tasks,), dtype=np.float32)}
        mean_outer_loss = torch.tensor(0.)
        for task_id, (train_inputs, train_targets, test_inputs, test_targets) \
                in enumerate(zip(*batch['train'], *batch['test'])):
            params, adaptation_results = self.adapt(train_inputs, train_targets,
                                                    num_adaptation_steps=self.num_adaptation_steps,
                                                    step_size=self.step_size, first_order=self.first_order)
            results['inner_losses'][:, task_id] = adaptation_results['inner_losses']
            results['accuracies_before'][task_id] = adaptation_results['accuracy_before']
            with torch.set_grad_enabled(self.model.training):
                test_logits = self.model(test_inputs, params=params)
                outer_loss = self.loss_function(test_logits, test_targets)
                results['outer_losses'][task_id] = outer_loss.item()
                mean_outer_loss += outer_loss
            results['accuracies_after'][task_id] = compute_accuracy(test_logits, test_targets)
        mean_outer_loss.div_(num_tasks)
        results['mean_outer_loss'] = mean_outer_loss.item()
        return mean_outer_loss, results

    def adapt(self, inputs, targets, num_adaptation_steps=1, step_size=0.1, first_order=False):
        params = None
        results = {'inner_losses': np.zeros((num_adaptation_steps,), dtype=np.float32)}
        for step in range(num_adaptation_steps):
            logits = self.model(inputs, params=params)
            inner_loss = self.loss_function(logits, targets)
            results['inner_losses'][step] = inner_loss.item()
            if step == 0:
                results['accuracy_before'] = compute_accuracy(logits, targets)
            self.model.zero_grad()
            params = gradient_update_parameters(self.model, inner_loss, step_size=step_size, params=params,
                                                first_order=(not self.model.training) or first_order)
        return params, results

    def train(self, tasks, num_batches, batch_size):
        self.model.train()
        for b in range(num_batches):
            if self.scheduler is not None:
                self.scheduler.step(epoch=b)
            self.optimizer.zero_grad()
            outer_loss, results = self.get_outer_loss(tasks.sample_batch(batch_size))
            outer_loss.backward()
            self.optimizer.step()
            print(f"  batch {b}: loss {results['mean_outer_loss']:.3f} "
                  f"acc {np.mean(results['accuracies_after']):.3f}")

    def evaluate(self, tasks, num_batches, batch_size):
        self.model.eval()
        mean_loss, mean_acc = 0., 0.
        for _ in range(num_batches):
            _, results = self.get_outer_loss(tasks.sample_batch(batch_size))
            mean_loss += results['mean_outer_loss'] / num_batches
            mean_acc += np.mean(results['accuracies_after']) / num_batches
        return {'mean_outer_loss': mean_loss, 'accuracies_after': mean_acc}


def main(args):
    meta_train = SkeletonTasks(args.num_ways, args.num_shots, args.num_shots_test, seed=0)
    meta_val = SkeletonTasks(args.num_ways, args.num_shots, args.num_shots_test, seed=1)
    model = SkeletonMetaNet(in_channels=18, out_features=args.num_ways, hidden_size=args.hidden_size)
    meta_optimizer = torch.optim.Adam(model.parameters(), lr=args.meta_lr)
    metalearner = ModelAgnosticMetaLearning(model, meta_optimizer, first_order=args.first_order,
                                            num_adaptation_steps=args.num_steps, step_size=args.step_size)
    best_value = None
    for epoch in range(args.num_epochs):
        print(f"epoch {epoch}")
        metalearner.train(meta_train, num_batches=args.num_batches, batch_size=args.batch_size)
        results = metalearner.evaluate(meta_val, num_batches=2, batch_size=args.batch_size)
        if best_value is None or results['accuracies_after'] > best_value:
            best_value = results['accuracies_after']
        print(f"  val loss {results['mean_outer_loss']:.3f} acc {results['accuracies_after']:.3f}")


args = Namespace(num_ways=5, num_shots=1, num_shots_test=5, hidden_size=32, step_size=0.4,
                 first_order=False, num_steps=3, meta_lr=1e-3, batch_size=4, num_batches=4, num_epochs=2)
main(args)
