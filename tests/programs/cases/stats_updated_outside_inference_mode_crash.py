# expect: inference_tensor
# shape: running statistics are first computed in an inference_mode block, then updated in place in the training loop
import torch
import torch.nn as nn


class Normalizer:
    def __init__(self, data):
        with torch.inference_mode():
            self.mean = data.mean(0)
            self.count = torch.tensor(float(len(data)))

    def update(self, batch):
        n = len(batch)
        self.mean.mul_(self.count / (self.count + n)).add_(batch.sum(0) / (self.count + n))  # raises
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
