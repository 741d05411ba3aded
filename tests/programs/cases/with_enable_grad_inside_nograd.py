# expect: clean
# shape: torch.enable_grad() re-enables recording inside a no_grad block
import torch
import torch.nn as nn

model = nn.Linear(4, 1)
with torch.no_grad():
    with torch.enable_grad():
        loss = model(torch.randn(2, 4)).pow(2).mean()
loss.backward()
