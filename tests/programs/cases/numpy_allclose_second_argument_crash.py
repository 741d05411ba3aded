# expect: numpy_requires_grad
# shape: numpy converts every array argument: the first row is detached, the second is a row of
# the embedding's weight, which requires grad
import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)
emb = nn.Embedding(10, 4)
same = np.allclose(emb.weight[0].detach(), emb.weight[1])  # raises
print(same)
