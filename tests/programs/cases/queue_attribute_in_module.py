# expect: freed_graph
# shape: a module keeps a queue of past keys on self, built with torch.cat without detach
import torch
import torch.nn as nn


class Queue(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16))
        self.queue = torch.randn(8, 16)

    def forward(self, x):
        keys = self.encoder(x)
        logits = keys @ self.queue.t()
        self.queue = torch.cat([keys, self.queue[:-keys.shape[0]]])
        return logits


model = Queue()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(3):
    loss = model(torch.randn(4, 8)).logsumexp(1).mean()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
