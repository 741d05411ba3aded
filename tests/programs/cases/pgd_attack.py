# expect: clean
# shape: a PGD adversarial attack: the input is re-detached and re-marked requires_grad each step
import torch
import torch.nn as nn

model = nn.Sequential(nn.Linear(4, 3))
x = torch.randn(2, 4)
y = torch.tensor([0, 2])
x_adv = x.clone().detach().requires_grad_(True)
for _ in range(3):
    loss = nn.functional.cross_entropy(model(x_adv), y)
    grad = torch.autograd.grad(loss, x_adv)[0]
    x_adv = x_adv.detach() + 0.01 * grad.sign()
    x_adv = torch.min(torch.max(x_adv, x - 0.1), x + 0.1).detach()
    x_adv.requires_grad_(True)
