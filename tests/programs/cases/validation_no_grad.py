# expect: clean
# shape: a train/validate epoch loop; validation under no_grad accumulates loss.item()
import torch
import torch.nn as nn

model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    model.train()
    for batch in range(3):
        opt.zero_grad()
        loss = model(torch.randn(2, 4)).pow(2).mean()
        loss.backward()
        opt.step()
    model.eval()
    total = 0.0
    with torch.no_grad():
        for batch in range(2):
            total += model(torch.randn(2, 4)).pow(2).mean().item()
