# expect: clean
# shape: a `@contextmanager` helper yields inside `with torch.no_grad():`; only the validation metric is computed in its body, the loss after it
import contextlib

import torch
import torch.nn as nn
import torch.nn.functional as F


@contextlib.contextmanager
def evaluating(model):
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield model
    finally:
        model.train(was_training)


torch.manual_seed(0)
net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
opt = torch.optim.SGD(net.parameters(), lr=0.1)
x, y = torch.randn(4, 8), torch.randint(0, 3, (4,))
with evaluating(net) as m:
    accuracy = (m(x).argmax(1) == y).float().mean()
loss = F.cross_entropy(net(x), y)
opt.zero_grad()
loss.backward()
opt.step()
