# expect: no_grad_fn
# shape: a regression loss on indices decoded with argmax over predicted bins
import torch
import torch.nn as nn

head = nn.Linear(6, 3 * 5)
opt = torch.optim.SGD(head.parameters(), lr=0.1)
for step in range(2):
    bins = head(torch.randn(4, 6)).view(4, 3, 5)
    coords = torch.argmax(bins, dim=2).float() / 4.0
    loss = (coords - torch.rand(4, 3)).abs().mean()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
