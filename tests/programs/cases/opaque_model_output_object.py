# expect: clean
# shape: a model built through a call GradGuard cannot see returns an output object; `.sample` of it is no tensor method
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
model.zero_grad()
labels = torch.randn_like(out)
loss = (out - labels).pow(2).mean()
loss.backward()
