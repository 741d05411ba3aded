# expect: clean
# shape: truncated BPTT: backward every k steps, the hidden state detached right after
import torch
import torch.nn as nn

rnn = nn.RNNCell(2, 4)
opt = torch.optim.SGD(rnn.parameters(), lr=0.1)
h = torch.zeros(1, 4)
loss = 0
for t in range(6):
    h = rnn(torch.randn(1, 2), h)
    loss = loss + h.pow(2).sum()
    if t % 3 == 2:
        opt.zero_grad()
        loss.backward()
        opt.step()
        h = h.detach()
        loss = 0
