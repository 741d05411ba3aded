# expect: no_grad_fn
# shape: a per-class soft-dice written on the argmax of the logits, in a helper
import torch
import torch.nn as nn


def class_overlap(logits, labels, classes=3):
    pred = logits.argmax(dim=1)
    total = 0.0
    for c in range(classes):
        p = (pred == c).float()
        t = (labels == c).float()
        total = total + 1 - 2 * (p * t).sum() / (p.sum() + t.sum() + 1e-6)
    return total / classes


net = nn.Linear(5, 3)
opt = torch.optim.Adam(net.parameters(), lr=0.01)
x, y = torch.randn(32, 5), torch.randint(0, 3, (32,))
for step in range(2):
    loss = class_overlap(net(x), y)
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
