# expect: clean
# shape: the same distiller clearing both lists after each step
import torch
import torch.nn as nn


class FeatureDistiller:
    def __init__(self, teacher, student):
        self.teacher, self.student = teacher, student
        self.t_feats, self.s_feats = [], []
        self.handles = [
            teacher[0].register_forward_hook(self._save_teacher),
            student[0].register_forward_hook(self._save_student),
        ]
        self.opt = torch.optim.SGD(student.parameters(), lr=0.1)

    def _save_teacher(self, module, inputs, output):
        self.t_feats.append(output)

    def _save_student(self, module, inputs, output):
        self.s_feats.append(output)

    def step(self, x):
        with torch.no_grad():
            self.teacher(x)
        logits = self.student(x)
        loss = logits.mean() + sum((s - t).pow(2).mean() for s, t in zip(self.s_feats, self.t_feats))
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.t_feats.clear()
        self.s_feats.clear()


teacher = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
student = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
d = FeatureDistiller(teacher, student)
for _ in range(3):
    d.step(torch.randn(2, 4))
