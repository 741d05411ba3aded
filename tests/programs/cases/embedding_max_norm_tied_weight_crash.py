# expect: inplace_version
# shape: the item scores use the embedding's weight, then a lookup with max_norm renormalizes
# that weight in place, so the matmul that saved it cannot run its backward
import torch
import torch.nn as nn

torch.manual_seed(0)
items = nn.Embedding(6, 4, max_norm=1.0)
user = torch.randn(2, 4, requires_grad=True)
catalog_scores = user @ items.weight.t()
history = items(torch.tensor([1, 3]))
loss = catalog_scores.logsumexp(1).mean() + history.pow(2).sum()
loss.backward()  # raises
