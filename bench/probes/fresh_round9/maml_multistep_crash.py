# expect: grad_unused
# source: https://github.com/tristandeleu/pytorch-meta/issues/91
"""MAML on sinusoid regression with a MetaModule-style MLP whose forward takes
an optional dict of fast weights; the inner loop adapts with
gradient_update_parameters for --num-steps steps per task."""
from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)


class MetaMLP(nn.Module):
    def __init__(self, hidden=40):
        super().__init__()
        self.l1, self.l2, self.l3 = nn.Linear(1, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, 1)

    def forward(self, inputs, params=None):
        if params is None:
            params = OrderedDict(self.named_parameters())
        x = F.relu(F.linear(inputs, params['l1.weight'], params['l1.bias']))
        x = F.relu(F.linear(x, params['l2.weight'], params['l2.bias']))
        return F.linear(x, params['l3.weight'], params['l3.bias'])


def gradient_update_parameters(model, loss, params=None, step_size=0.5, first_order=False):
    if params is None:
        params = OrderedDict(model.named_parameters())
    grads = torch.autograd.grad(loss, params.values(), create_graph=not first_order)  # raises
    updated_params = OrderedDict()
    for (name, param), grad in zip(params.items(), grads):
        updated_params[name] = param - step_size * grad
    return updated_params


def sinusoid_batch(batch_size, shots):
    amp = torch.empty(batch_size, 1, 1).uniform_(0.1, 5.0)
    phase = torch.empty(batch_size, 1, 1).uniform_(0, 3.1416)
    x = torch.empty(batch_size, 2 * shots, 1).uniform_(-5.0, 5.0)
    y = amp * torch.sin(x + phase)
    return x[:, :shots], y[:, :shots], x[:, shots:], y[:, shots:]


model = MetaMLP()
meta_optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
num_steps, step_size, first_order = 2, 0.01, False

for batch_idx in range(5):
    model.zero_grad()
    train_inputs, train_targets, test_inputs, test_targets = sinusoid_batch(4, 10)
    outer_loss = torch.tensor(0.)
    for task_idx in range(train_inputs.size(0)):
        params = None
        for step in range(num_steps):
            train_output = model(train_inputs[task_idx])
            inner_loss = F.mse_loss(train_output, train_targets[task_idx])
            params = gradient_update_parameters(model, inner_loss, params=params,
                                                step_size=step_size, first_order=first_order)
        test_output = model(test_inputs[task_idx], params=params)
        outer_loss += F.mse_loss(test_output, test_targets[task_idx])
    outer_loss.div_(train_inputs.size(0))
    outer_loss.backward()
    meta_optimizer.step()
    print(f'batch {batch_idx}: outer loss {outer_loss.item():.4f}')
