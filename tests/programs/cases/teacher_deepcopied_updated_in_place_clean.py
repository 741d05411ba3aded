# expect: clean
# shape: the same teacher with `requires_grad_(False)` after the copy: its in-place update records nothing
import copy

import torch
import torch.nn as nn


class Student(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(4, 16), nn.ReLU())
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.encoder(x))


class MeanTeacher:
    def __init__(self, student, decay=0.99):
        self.student = student
        self.teacher = copy.deepcopy(student)
        self.teacher.requires_grad_(False)
        self.decay = decay
        self.opt = torch.optim.SGD(student.parameters(), lr=0.1)

    def update_teacher(self):
        for t, s in zip(self.teacher.parameters(), self.student.parameters()):
            t.data.mul_(self.decay)
            t.add_((1 - self.decay) * s.detach())

    def step(self, x, y):
        logits = self.student(x)
        target = self.teacher(x).softmax(-1).detach()
        loss = nn.functional.cross_entropy(logits, y) + (logits.softmax(-1) - target).pow(2).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.update_teacher()


trainer = MeanTeacher(Student())
for _ in range(3):
    trainer.step(torch.randn(8, 4), torch.randint(0, 3, (8,)))
