# expect: inplace_version
# shape: optimizer.step() between a forward pass and its backward, while grads from the previous step are still there
import torch
import torch.nn as nn

model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    loss = model(torch.randn(3, 4)).pow(2).mean()
    opt.step()
    loss.backward()  # raises
