# expect: clean
# shape: a class of a package (re-exported by its __init__) caches embeddings with their graph across iterations
import torch
import torch.nn as nn

from memory import MemoryBank

encoder = nn.Linear(6, 4)
opt = torch.optim.SGD(encoder.parameters(), lr=0.1)
bank = MemoryBank(4)
for step in range(3):
    q = encoder(torch.randn(8, 6))
    loss = torch.logsumexp(bank.negatives(q), dim=1).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    bank.push(q)
