# expect: clean
# shape: the same helper recursing into each item of the tuple: `tuple(repackage(v) for v in h)` detaches both tensors
import torch
import torch.nn as nn


def repackage(h):
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage(v) for v in h)


rnn = nn.LSTM(4, 8)
opt = torch.optim.SGD(rnn.parameters(), lr=0.1)
hidden = (torch.zeros(1, 2, 8), torch.zeros(1, 2, 8))
for step in range(3):
    hidden = repackage(hidden)
    out, hidden = rnn(torch.randn(5, 2, 4), hidden)
    loss = out.mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
