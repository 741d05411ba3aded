# expect: no_grad_fn
# shape: the same output object, but the loss is built from the labels alone: nothing on its path requires grad
import functools
import types

import torch
import torch.nn as nn

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return types.SimpleNamespace(sample=self.lin(x))


model = functools.partial(Net)()
out = model(torch.randn(2, 4)).sample
labels = torch.randn_like(out)
loss = (labels - labels.mean()).pow(2).mean()
loss.backward()  # raises
