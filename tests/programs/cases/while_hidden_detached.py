# expect: clean
# shape: the same while loop, detaching the hidden state at the top of each iteration
import torch
import torch.nn as nn

cell = nn.GRUCell(4, 8)
opt = torch.optim.SGD(cell.parameters(), lr=0.1)
h = torch.zeros(2, 8)
step = 0
while step < 3:
    h = h.detach()
    h = cell(torch.randn(2, 4), h)
    loss = h.pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
