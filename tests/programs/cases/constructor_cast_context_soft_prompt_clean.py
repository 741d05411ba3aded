# expect: clean
# shape: the prompt asks for grad after the constructor (and its cast) returned, so it is the leaf the optimizer needs
import functools

import torch
import torch.nn as nn

CONSTRUCTORS = ("zeros", "randn")


def cast_constructor(fn, dtype):
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        tensor = fn(*args, **kwargs)
        if tensor.is_floating_point():
            tensor = tensor.to(dtype)
        return tensor
    return wrapped


class CastInit:
    def __init__(self, dtype=torch.bfloat16):
        self.dtype, self.saved = dtype, {}

    def __enter__(self):
        for name in CONSTRUCTORS:
            self.saved[name] = getattr(torch, name)
            setattr(torch, name, cast_constructor(self.saved[name], self.dtype))
        return self

    def __exit__(self, *exc):
        for name, fn in self.saved.items():
            setattr(torch, name, fn)
        return False


class SoftPrompt(nn.Module):
    def __init__(self, n=4, d=8):
        super().__init__()
        self.prompt = torch.zeros(n, d).requires_grad_()


with CastInit():
    model = SoftPrompt()
optimizer = torch.optim.AdamW([model.prompt], lr=1e-3)
loss = model.prompt.float().pow(2).sum()
loss.backward()
optimizer.step()
