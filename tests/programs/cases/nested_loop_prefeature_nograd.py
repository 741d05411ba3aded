# expect: clean
# shape: the outer-loop feature computed under torch.no_grad()
import torch
import torch.nn as nn

enc = nn.Linear(6, 6)
head = nn.Linear(6, 1)
opt = torch.optim.SGD(head.parameters(), lr=0.1)
for epoch in range(2):
    with torch.no_grad():
        feat = torch.tanh(enc(torch.randn(4, 6)))
    for i in range(3):
        loss = (head(feat) * i).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
