# expect: freed_graph
# shape: truncated BPTT whose detach helper, in another module, passes an LSTM's (h, c) through
import torch
import torch.nn as nn

from utils import repackage_hidden

lstm = nn.LSTM(3, 5, batch_first=True)
head = nn.Linear(5, 1)
opt = torch.optim.SGD(list(lstm.parameters()) + list(head.parameters()), lr=0.01)
hidden = (torch.zeros(1, 2, 5), torch.zeros(1, 2, 5))
for step in range(3):
    hidden = repackage_hidden(hidden)
    out, hidden = lstm(torch.randn(2, 4, 3), hidden)
    loss = head(out[:, -1]).pow(2).mean()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
