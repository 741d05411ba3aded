# expect: freed_graph
# shape: while loop carrying an RNN-style hidden state into the next iteration's backward
import torch
import torch.nn as nn

cell = nn.GRUCell(4, 8)
opt = torch.optim.SGD(cell.parameters(), lr=0.1)
h = torch.zeros(2, 8)
step = 0
while step < 3:
    h = cell(torch.randn(2, 4), h)
    loss = h.pow(2).mean()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
    step += 1
