# expect: clean
# shape: the per-sample losses are averaged where computed, so the backward and the log each get one number
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Linear(6, 3)
criterion = nn.CrossEntropyLoss(reduction="none")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
history = []
for step in range(3):
    x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
    opt.zero_grad()
    loss = criterion(model(x), y).mean()
    loss.backward()
    opt.step()
    history.append(loss.item())
print(history)
