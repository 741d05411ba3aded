# expect: freed_graph
# shape: a running mean kept on self, updated in forward without detach, reaches last step's graph
import torch
import torch.nn as nn


class Normalizer(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.running_mean = torch.zeros(4)

    def forward(self, x):
        h = self.lin(x)
        self.running_mean = 0.9 * self.running_mean + 0.1 * torch.tanh(h).mean(0)
        return h - self.running_mean


model = Normalizer()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
