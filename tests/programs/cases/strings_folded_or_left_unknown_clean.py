# expect: clean
# shape: string methods on known strings that raise or grow too large are left unknown: `"{name}".format(...)` with no such keyword, a missing positional field, a format spec the value does not fit, a huge `zfill`; the training loop around them runs clean
import torch
from torch import nn

templates = ["=> loading '{name}'", "{0} and {1}", "{:d}"]
labels = []
for t in templates:
    try:
        labels.append(t.format("x"))
    except (KeyError, IndexError, ValueError):
        labels.append(t)
wide = "0".zfill(100_000)
model = nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    loss = model(torch.randn(4, 3)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(labels, len(wide))
