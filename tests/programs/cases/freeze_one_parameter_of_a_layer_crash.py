# expect: no_grad_fn
# shape: the twin of freeze_one_parameter_of_a_layer_clean.py that also freezes the bias, one parameter at a time: no parameter requires grad and the loss has no graph
import torch
from torch import nn


class Probe(nn.Module):
    def __init__(self, dim, classes):
        super().__init__()
        self.fc = nn.Linear(dim, classes)
        self.fc.weight.requires_grad = False
        self.fc.bias.requires_grad = False

    def forward(self, x):
        return self.fc(x)


torch.manual_seed(0)
probe = Probe(6, 2)
opt = torch.optim.SGD(probe.parameters(), lr=0.1)
for _ in range(3):
    x, y = torch.randn(8, 6), torch.randint(0, 2, (8,))
    loss = nn.functional.cross_entropy(probe(x), y)
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
