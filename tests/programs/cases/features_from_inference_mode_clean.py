# expect: clean
# shape: the same probe computes the features under no_grad: ordinary tensors, which a Linear layer may save
import torch
import torch.nn as nn
import torch.nn.functional as F


class LinearProbe:
    def __init__(self, encoder, n_classes):
        self.encoder = encoder.eval()
        self.head = nn.Linear(16, n_classes)
        self.optimizer = torch.optim.SGD(self.head.parameters(), lr=0.1)

    @torch.no_grad()
    def embed(self, x):
        return self.encoder(x)

    def fit(self, x, y, epochs):
        feats = self.embed(x)
        for _ in range(epochs):
            self.optimizer.zero_grad()
            loss = F.cross_entropy(self.head(feats), y)
            loss.backward()
            self.optimizer.step()
        return loss.item()


encoder = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
probe = LinearProbe(encoder, 3)
print(probe.fit(torch.randn(32, 8), torch.randint(0, 3, (32,)), epochs=3))
