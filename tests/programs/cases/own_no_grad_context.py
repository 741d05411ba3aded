# expect: clean
# shape: a project's own no_grad context manager around a manual weight update
import contextlib

import torch


@contextlib.contextmanager
def no_grad_ctx():
    with torch.no_grad():
        yield


w = torch.zeros(3, requires_grad=True)
loss = (w * torch.randn(3)).sum()
loss.backward()
with no_grad_ctx():
    w -= 0.1 * w.grad
