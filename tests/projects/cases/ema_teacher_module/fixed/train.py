# expect: clean
# shape: the same helper under `@torch.no_grad()`
import torch
import torch.nn as nn

from ema import ema_update, make_teacher

student = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4))
teacher = make_teacher(student)
opt = torch.optim.SGD(student.parameters(), lr=0.1)
for step in range(3):
    x = torch.randn(2, 4)
    loss = (student(x) - teacher(x).detach()).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    ema_update(teacher, student)
