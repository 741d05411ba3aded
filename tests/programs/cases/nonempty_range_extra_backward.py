# expect: freed_graph
# shape: the same extra backward passes in `for i in range(1, 2)`: the body runs once, on a freed graph
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    for i in range(1, 2):
        loss.backward()  # raises
    opt.step()
