# expect: clean
# shape: the optimizer calls the closure in each step; the target it regresses to was computed
# before the loop without a graph (no_grad), so every step's backward has its own
import torch
import torch.nn as nn

torch.manual_seed(0)
teacher = nn.Linear(4, 2)
student = nn.Linear(4, 2)
x = torch.randn(16, 4)
with torch.no_grad():
    target = teacher(x)
opt = torch.optim.SGD(student.parameters(), lr=0.1)


def closure():
    opt.zero_grad()
    loss = (student(x) - target).pow(2).mean()
    loss.backward()
    return loss


for step in range(3):
    loss = opt.step(closure)
    print(step, loss.item())
