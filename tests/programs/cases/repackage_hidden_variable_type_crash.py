# expect: freed_graph
# shape: the pre-0.4 repackage_hidden tests `type(h) == Variable`, which no tensor's type is since 0.4, so it rebuilds the state tuple without detaching its tensors and the next batch backpropagates into the last batch's freed graph
import torch
import torch.nn as nn
from torch.autograd import Variable


def repackage_hidden(h):
    if type(h) == Variable:
        return Variable(h.data)
    else:
        return tuple(repackage_hidden(v) if isinstance(v, tuple) else v for v in h)


torch.manual_seed(0)
rnn = nn.LSTM(8, 16)
head = nn.Linear(16, 8)
opt = torch.optim.SGD(list(rnn.parameters()) + list(head.parameters()), lr=0.1)
hidden = (torch.zeros(1, 4, 16), torch.zeros(1, 4, 16))
for batch in range(3):
    x, y = torch.randn(5, 4, 8), torch.randn(5, 4, 8)
    hidden = repackage_hidden(hidden)
    out, hidden = rnn(x, hidden)
    loss = (head(out) - y).pow(2).mean()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
