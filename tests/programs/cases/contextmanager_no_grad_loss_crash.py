# expect: no_grad_fn
# shape: a `@contextmanager` helper puts the model in eval mode and yields inside `with torch.no_grad():`; a fine-tuning loss computed in its body is backpropagated
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
    loss = F.cross_entropy(m(x), y)
opt.zero_grad()
loss.backward()  # raises
opt.step()
