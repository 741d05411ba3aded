# expect: freed_graph
# shape: `if "prev" in locals():` reads a value the previous batch left behind, with its (freed) graph
import torch
import torch.nn as nn

torch.manual_seed(0)
cell = nn.GRUCell(4, 4)


def train():
    for batch in range(2):
        for t in range(3):
            if "prev" in locals():
                h = cell(torch.randn(2, 4), prev)
            else:
                h = cell(torch.randn(2, 4))
            prev = h
        loss = h.pow(2).mean()
        loss.backward()  # raises


train()
