# expect: numpy_requires_grad
# shape: a metrics helper called from the training loop converts the model's probabilities with `.cpu().numpy()`, gradients on
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))

    def forward(self, x):
        return self.body(x)


def batch_metrics(logits, labels):
    probs = F.softmax(logits, dim=1)
    confidence = probs.max(dim=1).values.cpu().numpy()  # raises
    _, predicted = logits.max(1)
    hits = (predicted.numpy() == labels.numpy()).mean()
    return float(hits), float(np.mean(confidence))


model = Classifier()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
for step in range(3):
    optimizer.zero_grad()
    logits = model(x)
    loss = F.cross_entropy(logits, y)
    loss.backward()
    optimizer.step()
    print(step, batch_metrics(logits, y))
