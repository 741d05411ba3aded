# expect: clean
# shape: `params = list(model.parameters())` taken before the loop; manual SGD over it under no_grad
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
params = list(model.parameters())
for step in range(3):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    loss.backward()
    with torch.no_grad():
        for p in params:
            p -= 0.1 * p.grad
            p.grad = None
