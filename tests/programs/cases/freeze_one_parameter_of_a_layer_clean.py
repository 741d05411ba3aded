# expect: clean
# shape: a linear probe whose weight is frozen to its initialisation while its bias is trained: a layer's parameters have flags of their own, and the bias still gives the loss a graph
import torch
from torch import nn


class Probe(nn.Module):
    def __init__(self, dim, classes):
        super().__init__()
        self.fc = nn.Linear(dim, classes)
        self.fc.weight.requires_grad = False

    def forward(self, x):
        return self.fc(x)


torch.manual_seed(0)
probe = Probe(6, 2)
opt = torch.optim.SGD([p for p in probe.parameters() if p.requires_grad], lr=0.1)
for _ in range(3):
    x, y = torch.randn(8, 6), torch.randint(0, 2, (8,))
    loss = nn.functional.cross_entropy(probe(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
