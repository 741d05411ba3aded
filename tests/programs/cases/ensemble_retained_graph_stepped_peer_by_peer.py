# expect: inplace_version
# shape: an ensemble whose members each mimic the others (`if j != i` in a loop of known length); the graph is retained for the next member, but each member's optimizer step changes weights that graph saved
import torch
import torch.nn as nn
import torch.nn.functional as F

members = [nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3)) for _ in range(2)]
optimizers = [torch.optim.SGD(m.parameters(), lr=0.05) for m in members]
x = torch.randn(8, 6)
outputs = {i: m(x) for i, m in enumerate(members)}
for i in range(len(members)):
    agreement = 0.0
    for j in range(len(members)):
        if j != i:
            agreement = agreement + F.mse_loss(outputs[i], outputs[j])
    optimizers[i].zero_grad()
    agreement.backward(retain_graph=True)  # raises
    optimizers[i].step()
