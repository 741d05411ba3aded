# expect: clean
# shape: a training loop in a package module, re-exported by the package's __init__; the script has no backward
import torch
import torch.nn as nn

from training import Trainer

encoder = nn.Sequential(nn.Linear(4, 8), nn.Tanh())
head = nn.Linear(8, 1)
data = (torch.randn(32, 4), torch.randn(32, 1))
trainer = Trainer(encoder, head, data)
print(trainer.fit())
