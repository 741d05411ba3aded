# expect: no_grad_fn
# shape: a recommender whose only layer is nn.Embedding.from_pretrained(vectors): the weight is frozen by default (freeze=True), so the scores built from it have no graph
import numpy as np
import torch
import torch.nn as nn


class ItemScorer(nn.Module):
    def __init__(self, vectors):
        super().__init__()
        self.items = nn.Embedding.from_pretrained(torch.from_numpy(vectors))
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
    loss.backward()  # raises
    optimizer.step()
