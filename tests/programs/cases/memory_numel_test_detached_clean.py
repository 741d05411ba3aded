# expect: clean
# shape: a memory starts empty (numel() is 0, so the first step skips it) and then keeps the
# last step's hidden state detached; the second step reads it without a graph
import torch
import torch.nn as nn

torch.manual_seed(0)
layer = nn.Linear(3, 3)
opt = torch.optim.SGD(layer.parameters(), lr=0.1)
x = torch.randn(4, 3)
memory = torch.empty(0)
for step in range(3):
    h = torch.tanh(layer(x))
    if memory.numel():
        h = h + memory.mean(0)
    memory = h.detach()
    loss = h.pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
