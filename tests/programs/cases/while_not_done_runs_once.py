# expect: clean
# shape: a `while not done:` loop whose body sets `done = True`: it runs once, so its backward runs once
import torch
import torch.nn as nn

model = nn.Linear(4, 1)
x = torch.randn(8, 4)
out = model(x)
done = False
while not done:
    loss = out.pow(2).mean()
    loss.backward()
    done = True
