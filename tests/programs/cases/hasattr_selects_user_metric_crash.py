# expect: numpy_requires_grad
# shape: a base training plan calls the subclass's `testing_step` when `hasattr(self, "testing_step")` (else a built-in accuracy under no_grad); the subclass's metric keeps the graph and is converted with `.numpy()`
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def to_float(value):
    if isinstance(value, torch.Tensor):
        value = value.numpy()  # raises
    return float(np.asarray(value))


class BasePlan:
    def __init__(self, model):
        self.model = model

    def testing_routine(self, data, target):
        if hasattr(self, "testing_step"):
            evaluate = getattr(self, "testing_step")
        else:
            def evaluate(x, y):
                with torch.no_grad():
                    return (self.model(x).argmax(1) == y).float().mean()
        return [to_float(v) for v in evaluate(data, target)]


class MyPlan(BasePlan):
    def testing_step(self, data, target):
        output = self.model(data)
        return [F.cross_entropy(output, target), (output.argmax(1) == target).float().mean()]


torch.manual_seed(0)
plan = MyPlan(nn.Linear(6, 2))
print(plan.testing_routine(torch.randn(8, 6), torch.randint(0, 2, (8,))))
