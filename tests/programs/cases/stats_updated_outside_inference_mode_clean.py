# expect: clean
# shape: the same statistics computed under no_grad: ordinary tensors, updated in place without complaint
import torch
import torch.nn as nn


class Normalizer:
    def __init__(self, data):
        with torch.no_grad():
            self.mean = data.mean(0)
            self.count = torch.tensor(float(len(data)))

    def update(self, batch):
        n = len(batch)
        self.mean.mul_(self.count / (self.count + n)).add_(batch.sum(0) / (self.count + n))
        self.count += n

    def __call__(self, x):
        return x - self.mean


model = nn.Linear(4, 1)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
norm = Normalizer(torch.randn(64, 4))
for step in range(3):
    batch = torch.randn(16, 4)
    norm.update(batch)
    loss = model(norm(batch)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
