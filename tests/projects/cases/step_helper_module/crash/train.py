# expect: freed_graph
# shape: a GRU state carried between calls of an imported training step: the second call's backward, inside the module, reaches the graph the first freed
import torch
import torch.nn as nn

from steps import train_step

gru = nn.GRU(4, 8, batch_first=True)
head = nn.Linear(8, 1)
opt = torch.optim.Adam(list(gru.parameters()) + list(head.parameters()), lr=1e-3)
h = torch.zeros(1, 2, 8)
for chunk in torch.randn(3, 2, 5, 4):
    h = train_step(gru, head, opt, chunk, h)  # raises
