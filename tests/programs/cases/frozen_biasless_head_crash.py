# expect: no_grad_fn
# shape: a bias-free output head has its weight frozen by name, and the encoder runs under no_grad for feature extraction; the logits then have no graph
import torch
import torch.nn as nn

torch.manual_seed(0)
emb = nn.Embedding(20, 8)
encoder = nn.GRU(8, 8, batch_first=True)
head = nn.Linear(8, 20, bias=False)
head.weight.requires_grad = False
ids = torch.randint(0, 20, (2, 5))
with torch.no_grad():
    feats, _ = encoder(emb(ids))
loss = nn.functional.cross_entropy(head(feats).flatten(0, 1), ids.flatten())
loss.backward()  # raises
