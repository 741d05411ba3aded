# expect: clean
# shape: numpy converts every array argument: both rows of the embedding's weight are detached
import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)
emb = nn.Embedding(10, 4)
same = np.allclose(emb.weight[0].detach(), emb.weight[1].detach())
print(same)
