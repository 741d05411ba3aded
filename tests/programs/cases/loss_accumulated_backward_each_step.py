# expect: freed_graph
# shape: a running loss that is never reset is backpropagated every iteration
import torch
import torch.nn as nn

model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
total = 0
for step in range(3):
    total = total + model(torch.randn(2, 4)).pow(2).mean()
    opt.zero_grad()
    total.backward()  # raises
    opt.step()
