# expect: clean
# shape: the same margin loss averaged over the batch
import torch
import torch.nn as nn
import torch.nn.functional as F


def true_class_prob(scores, labels):
    return F.softmax(scores, dim=1).gather(1, labels.long().view(-1, 1))


def margin_loss(scores_a, scores_b, labels, margin=0.05):
    return torch.clamp(true_class_prob(scores_a, labels) - true_class_prob(scores_b, labels) + margin, min=0)


coarse, fine = nn.Linear(10, 4), nn.Linear(10, 4)
optimizer = torch.optim.SGD(fine.parameters(), lr=0.1)
x, labels = torch.randn(16, 10), torch.randint(0, 4, (16,))
loss = margin_loss(coarse(x), fine(x), labels).mean()
loss.backward()
optimizer.step()
