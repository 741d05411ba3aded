# expect: clean
# shape: the caching wrapper is made but the encoder's forward is not replaced; each step runs the encoder anew
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
cached = cache.wrap(encoder.forward)
opt = torch.optim.SGD(head.parameters(), lr=0.1)
x = torch.randn(4, 6)
for step in range(3):
    opt.zero_grad()
    loss = head(encoder(x)).pow(2).mean()
    loss.backward()
    opt.step()
