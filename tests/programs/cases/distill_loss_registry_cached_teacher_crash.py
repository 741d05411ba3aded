# expect: freed_graph
# shape: a distiller registers its KD loss in a ModuleDict by item assignment; the teacher's logits are computed once, with their graph, and each step's backward goes through them again
import torch
import torch.nn as nn
import torch.nn.functional as F


class Distiller(nn.Module):
    def __init__(self, tau=2.0):
        super().__init__()
        self.tau = tau
        self.losses = nn.ModuleDict()
        self.losses["loss_kd"] = nn.KLDivLoss(reduction="batchmean")

    def forward(self, student_logits, teacher_logits):
        return self.losses["loss_kd"](F.log_softmax(student_logits / self.tau, dim=1),
                                      F.softmax(teacher_logits / self.tau, dim=1))


torch.manual_seed(0)
teacher, student = nn.Linear(10, 5), nn.Linear(10, 5)
distiller = Distiller()
opt = torch.optim.SGD(student.parameters(), lr=0.1)
x = torch.randn(16, 10)
teacher_logits = teacher(x)
for step in range(3):
    loss = distiller(student(x), teacher_logits)
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
