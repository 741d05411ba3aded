# expect: leaf_inplace
# shape: the same manual update inside a context manager that leaves gradient recording on
import contextlib

import torch


@contextlib.contextmanager
def timer():
    yield


w = torch.zeros(3, requires_grad=True)
loss = (w * torch.randn(3)).sum()
loss.backward()
with timer():
    w -= 0.1 * w.grad  # raises
