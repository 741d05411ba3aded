# expect: clean
# shape: the copy is detached before its flag is set, so it is a leaf whose .grad autograd fills
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 3))
scale = torch.ones(10, requires_grad=True)


def pgd(model, x, y, eps=0.1, steps=3):
    x_adv = x.detach().clone()
    x_adv.requires_grad = True
    for _ in range(steps):
        loss = nn.functional.cross_entropy(model(x_adv), y)
        loss.backward()
        x_adv = (x_adv + eps * x_adv.grad.sign()).detach().requires_grad_()
    return x_adv


x = torch.randn(4, 10) * scale
y = torch.tensor([0, 1, 2, 0])
print(pgd(model, x, y).shape)
