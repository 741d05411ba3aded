# expect: clean
# shape: the hidden state is detached at each epoch; the inner loop runs inputs.size(1) times,
# a size known from the slice of a tensor of known shape, so it surely runs
import torch
import torch.nn as nn

torch.manual_seed(0)
seq = torch.randn(2, 6, 3)
inputs, targets = seq[:, :-1], seq[:, 1:]
cell = nn.GRUCell(3, 8)
head = nn.Linear(8, 3)
opt = torch.optim.SGD(list(cell.parameters()) + list(head.parameters()), lr=0.1)
h = torch.zeros(2, 8)
for epoch in range(2):
    loss = 0.0
    h = h.detach()
    for t in range(inputs.size(1)):
        h = cell(inputs[:, t], h)
        loss = loss + (head(h) - targets[:, t]).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
