# expect: freed_graph
# shape: a memory bank (a list cut to its last entries each step) keeps keys with their graph; the next step's loss reaches the freed one
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

encoder = nn.Linear(6, 4)
opt = torch.optim.SGD(encoder.parameters(), lr=0.1)
queue = []
QUEUE_LEN = 3

for step in range(5):
    x = torch.randn(8, 6)
    q = F.normalize(encoder(x), dim=1)
    k = F.normalize(encoder(x + 0.05 * torch.randn_like(x)), dim=1)
    pos = (q * k).sum(1, keepdim=True)
    if queue:
        negs = torch.cat(queue, dim=0)
        logits = torch.cat([pos, q @ negs.t()], dim=1)
    else:
        logits = pos
    loss = F.cross_entropy(logits / 0.1, torch.zeros(8, dtype=torch.long))
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
    queue.append(k)
    queue = queue[-QUEUE_LEN:]
    print(step, loss.item())
