# expect: freed_graph
# shape: two heads' outputs in a dict keyed by ints; a loop over the heads backpropagates a loss that reads both entries, so the second iteration goes through graphs the first freed
import torch
import torch.nn as nn
import torch.nn.functional as F

heads = [nn.Linear(4, 3), nn.Linear(4, 3)]
optimizers = [torch.optim.SGD(h.parameters(), lr=0.1) for h in heads]
x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
outputs = {0: heads[0](x), 1: heads[1](x)}
for i in range(2):
    other = 1 - i
    loss = F.cross_entropy(outputs[i], y) + F.mse_loss(outputs[i], outputs[other])
    optimizers[i].zero_grad()
    loss.backward()  # raises
    optimizers[i].step()
