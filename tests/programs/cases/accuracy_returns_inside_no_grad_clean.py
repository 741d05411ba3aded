# expect: clean
# shape: a metric helper returns from inside `with torch.no_grad():` (leaving the block restores the mode), then training goes on
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


def accuracy(output, target):
    with torch.no_grad():
        pred = output.argmax(dim=1)
        return (pred == target).float().mean()


def setup(train):
    torch.set_grad_enabled(train)
    model = nn.Linear(4, 3)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


model, opt = setup(train=True)
for step in range(3):
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    output = model(x)
    loss = F.cross_entropy(output, y)
    acc = accuracy(output, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
