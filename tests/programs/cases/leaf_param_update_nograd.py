# expect: clean
# shape: a hand-written SGD update of parameters under torch.no_grad()
import torch
import torch.nn as nn

model = nn.Linear(3, 1)
for step in range(3):
    loss = model(torch.randn(4, 3)).pow(2).mean()
    model.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.1 * p.grad
