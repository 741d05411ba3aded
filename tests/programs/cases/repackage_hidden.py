# expect: clean
# shape: the word-language-model idiom: a recursive helper detaches the (h, c) hidden state every batch
import torch
import torch.nn as nn


def repackage_hidden(h):
    """Wraps hidden states in new Tensors, to detach them from their history."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    else:
        return tuple(repackage_hidden(v) for v in h)


lstm = nn.LSTM(4, 8)
opt = torch.optim.SGD(lstm.parameters(), lr=0.1)
hidden = (torch.zeros(1, 2, 8), torch.zeros(1, 2, 8))
for batch in range(3):
    hidden = repackage_hidden(hidden)
    out, hidden = lstm(torch.randn(5, 2, 4), hidden)
    loss = out.pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
