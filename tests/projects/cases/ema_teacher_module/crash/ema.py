import copy


def make_teacher(student):
    return copy.deepcopy(student)


def ema_update(teacher, student, decay=0.99):
    for t, s in zip(teacher.parameters(), student.parameters()):
        t.mul_(decay).add_(s.detach(), alpha=1 - decay)
