# expect: clean
# shape: the same recommender with nn.Embedding.from_pretrained(vectors, freeze=False): the weight is trained
import numpy as np
import torch
import torch.nn as nn


class ItemScorer(nn.Module):
    def __init__(self, vectors):
        super().__init__()
        self.items = nn.Embedding.from_pretrained(torch.from_numpy(vectors), freeze=False)
        self.loss_fct = nn.CrossEntropyLoss()

    def forward(self, seq):
        pooled = self.items(seq).mean(1)
        return torch.matmul(pooled, self.items.weight.transpose(0, 1))

    def calculate_loss(self, seq, target):
        return self.loss_fct(self.forward(seq), target)


model = ItemScorer(np.random.randn(20, 8).astype(np.float32))
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
for step in range(2):
    seq = torch.randint(0, 20, (4, 5))
    optimizer.zero_grad()
    loss = model.calculate_loss(seq, seq[:, -1])
    loss.backward()
    optimizer.step()
