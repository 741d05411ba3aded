# expect: clean
# shape: two heads' outputs in a dict keyed by ints; each loss reads the other head's output detached, so each backward frees only its own head's graph
import torch
import torch.nn as nn
import torch.nn.functional as F

heads = [nn.Linear(4, 3), nn.Linear(4, 3)]
optimizers = [torch.optim.SGD(h.parameters(), lr=0.1) for h in heads]
x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
outputs = {0: heads[0](x), 1: heads[1](x)}
for i in range(2):
    other = 1 - i
    loss = F.cross_entropy(outputs[i], y) + F.mse_loss(outputs[i], outputs[other].detach())
    optimizers[i].zero_grad()
    loss.backward()
    optimizers[i].step()
