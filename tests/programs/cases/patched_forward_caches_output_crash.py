# expect: freed_graph
# shape: an encoder's forward is replaced on the instance (`encoder.forward = cached(encoder.forward)`) by a wrapper that keeps its first output; every later call returns that output, whose graph the first backward freed
import torch
import torch.nn as nn


class OutputCache:
    def __init__(self):
        self.value = None

    def wrap(self, forward):
        def cached_forward(x):
            if self.value is None:
                self.value = forward(x)
            return self.value
        return cached_forward


torch.manual_seed(0)
encoder = nn.Sequential(nn.Linear(6, 8), nn.Tanh())
head = nn.Linear(8, 1)
cache = OutputCache()
encoder.forward = cache.wrap(encoder.forward)
opt = torch.optim.SGD(head.parameters(), lr=0.1)
x = torch.randn(4, 6)
for step in range(3):
    opt.zero_grad()
    loss = head(encoder(x)).pow(2).mean()
    loss.backward()  # raises
    opt.step()
