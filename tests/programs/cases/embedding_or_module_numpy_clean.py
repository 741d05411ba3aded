# expect: clean
# shape: a visualisation helper takes a detached copy of a layer's weight, or the layer itself if it has none, converts it to numpy and computes norms with numpy: numpy arrays carry no graph (nn.Linear has no `numpy` to call)
import numpy as np
import torch
import torch.nn as nn


def neighbours(embeddings, index, k=3):
    vectors = embeddings.cpu().numpy()
    query = vectors[index]
    denom = np.sqrt(query.dot(query) * np.sum(vectors ** 2, 1))
    return list((vectors.dot(query) / denom).argsort()[::-1][:k])


rho = nn.Linear(4, 10, bias=False)
try:
    embeddings = rho.weight.detach()
except AttributeError:
    embeddings = rho
print(neighbours(embeddings, 2))
