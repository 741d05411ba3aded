# expect: clean
# shape: mean-teacher training: the EMA copy updated in place under no_grad after each step
import copy

import torch
import torch.nn as nn

student = nn.Linear(4, 4)
teacher = copy.deepcopy(student)
for p in teacher.parameters():
    p.requires_grad_(False)
opt = torch.optim.SGD(student.parameters(), lr=0.1)
for step in range(3):
    x = torch.randn(2, 4)
    with torch.no_grad():
        target = teacher(x)
    loss = (student(x) - target).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    with torch.no_grad():
        for tp, sp in zip(teacher.parameters(), student.parameters()):
            tp.mul_(0.99).add_(sp, alpha=0.01)
