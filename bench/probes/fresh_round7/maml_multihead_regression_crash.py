# expect: grad_unused
# source: https://github.com/tristandeleu/pytorch-meta/pull/145
"""MAML on a mixed family of 1-D regression tasks (sinusoids and lines).

The network shares a feature extractor across task families and keeps one
output head per family. The MetaModule / gradient_update_parameters helpers
follow torchmeta (torchmeta/modules/*.py, torchmeta/utils/gradient_based.py).
"""
import math
import re
import warnings
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)


# ------------------------------------------------------------------ torchmeta.modules
class MetaModule(nn.Module):
    """Base class for modules that accept an extra ``params`` argument in forward."""

    def __init__(self):
        super(MetaModule, self).__init__()
        self._children_modules_parameters_cache = dict()

    def meta_named_parameters(self, prefix='', recurse=True):
        gen = self._named_members(
            lambda module: module._parameters.items()
            if isinstance(module, MetaModule) else [],
            prefix=prefix, recurse=recurse)
        for elem in gen:
            yield elem

    def meta_parameters(self, recurse=True):
        for name, param in self.meta_named_parameters(recurse=recurse):
            yield param

    def get_subdict(self, params, key=None):
        if params is None:
            return None
        all_names = tuple(params.keys())
        if (key, all_names) not in self._children_modules_parameters_cache:
            if key is None:
                self._children_modules_parameters_cache[(key, all_names)] = all_names
            else:
                key_re = re.compile(r'^{0}\.(.+)'.format(re.escape(key)))
                self._children_modules_parameters_cache[(key, all_names)] = [
                    key_re.sub(r'\1', k) for k in all_names if key_re.match(k) is not None]
        names = self._children_modules_parameters_cache[(key, all_names)]
        if not names:
            warnings.warn('Module `{0}` has no parameter corresponding to the submodule '
                          'named `{1}`.'.format(self.__class__.__name__, key), stacklevel=2)
            return None
        return OrderedDict([(name, params[f'{key}.{name}']) for name in names])


class MetaLinear(nn.Linear, MetaModule):
    def forward(self, input, params=None):
        if params is None:
            params = OrderedDict(self.named_parameters())
        bias = params.get('bias', None)
        return F.linear(input, params['weight'], bias)


class MetaSequential(nn.Sequential, MetaModule):
    def forward(self, input, params=None):
        for name, module in self._modules.items():
            if isinstance(module, MetaModule):
                input = module(input, params=self.get_subdict(params, name))
            else:
                input = module(input)
        return input


# ------------------------------------------------------------------ torchmeta.utils.gradient_based
def gradient_update_parameters(model, loss, params=None, step_size=0.5, first_order=False):
    """Update of the meta-parameters with one step of gradient descent on the loss."""
    if not isinstance(model, MetaModule):
        raise ValueError('The model must be an instance of `MetaModule`, '
                         'got `{0}`'.format(type(model)))
    if params is None:
        params = OrderedDict(model.meta_named_parameters())

    grads = torch.autograd.grad(loss, params.values(), create_graph=not first_order)  # raises

    updated_params = OrderedDict()
    for (name, param), grad in zip(params.items(), grads):
        updated_params[name] = param - step_size * grad
    return updated_params


# ------------------------------------------------------------------ model and tasks
class MultiHeadRegressor(MetaModule):
    def __init__(self, families, hidden_size=40):
        super().__init__()
        self.features = MetaSequential(OrderedDict([
            ('layer1', MetaLinear(1, hidden_size)),
            ('relu1', nn.ReLU()),
            ('layer2', MetaLinear(hidden_size, hidden_size)),
            ('relu2', nn.ReLU()),
        ]))
        self.heads = nn.ModuleDict({family: MetaLinear(hidden_size, 1) for family in families})

    def forward(self, inputs, family, params=None):
        features = self.features(inputs, params=self.get_subdict(params, 'features'))
        head_params = self.get_subdict(params, f'heads.{family}')
        return self.heads[family](features, params=head_params)


@dataclass
class TrainConfig:
    num_shots: int = 10
    test_shots: int = 15
    batch_size: int = 4
    num_batches: int = 30
    step_size: float = 0.01
    meta_lr: float = 1e-3
    first_order: bool = False


def sample_task(rng):
    family = 'sine' if rng.rand() < 0.5 else 'line'
    if family == 'sine':
        amp, phase = rng.uniform(0.1, 5.0), rng.uniform(0, math.pi)
        fn = lambda x: amp * np.sin(x + phase)
    else:
        slope, intercept = rng.uniform(-3, 3), rng.uniform(-3, 3)
        fn = lambda x: slope * x + intercept
    return family, fn


def sample_batch(rng, cfg):
    batch = []
    for _ in range(cfg.batch_size):
        family, fn = sample_task(rng)
        x = rng.uniform(-5, 5, size=(cfg.num_shots + cfg.test_shots, 1))
        y = fn(x)
        x, y = torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)
        batch.append((family, x[:cfg.num_shots], y[:cfg.num_shots], x[cfg.num_shots:], y[cfg.num_shots:]))
    return batch


def train(cfg):
    rng = np.random.RandomState(1)
    model = MultiHeadRegressor(families=['line', 'sine'])
    model.train()
    meta_optimizer = torch.optim.Adam(model.parameters(), lr=cfg.meta_lr)

    for batch_idx in range(cfg.num_batches):
        model.zero_grad()
        outer_loss = torch.tensor(0.)
        for family, train_input, train_target, test_input, test_target in sample_batch(rng, cfg):
            train_pred = model(train_input, family)
            inner_loss = F.mse_loss(train_pred, train_target)

            model.zero_grad()
            params = gradient_update_parameters(model, inner_loss,
                                                step_size=cfg.step_size,
                                                first_order=cfg.first_order)

            test_pred = model(test_input, family, params=params)
            outer_loss += F.mse_loss(test_pred, test_target)

        outer_loss.div_(cfg.batch_size)
        outer_loss.backward()
        meta_optimizer.step()
        if batch_idx % 10 == 0:
            print(f'batch {batch_idx:3d}  outer loss {outer_loss.item():.4f}')
    return model


model = train(TrainConfig())
print('meta-parameters:', sum(p.numel() for p in model.meta_parameters()))
