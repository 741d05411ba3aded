# expect: grad_unused
# shape: MAML's inner loop keeps fast weights in a dict made from `named_parameters()`, updated item by item from `autograd.grad(loss, params.values())`; the second step's forward forgets to use them, so the loss does not depend on the tensors it differentiates
from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn


class MetaNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(1, 16)
        self.out = nn.Linear(16, 1)

    def forward(self, x, params=None):
        if params is None:
            params = OrderedDict(self.named_parameters())
        h = torch.tanh(F.linear(x, params["hidden.weight"], params["hidden.bias"]))
        return F.linear(h, params["out.weight"], params["out.bias"])


def adapt(model, loss, params=None, lr=0.1):
    if params is None:
        params = OrderedDict(model.named_parameters())
    grads = torch.autograd.grad(loss, params.values(), create_graph=True)  # raises
    return OrderedDict((name, p - lr * g) for (name, p), g in zip(params.items(), grads))


torch.manual_seed(0)
model = MetaNet()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x, y = torch.randn(10, 1), torch.randn(10, 1)
params = None
for step in range(2):
    loss = F.mse_loss(model(x), y)
    params = adapt(model, loss, params)
outer = F.mse_loss(model(x, params), y)
opt.zero_grad()
outer.backward()
opt.step()
