# expect: clean
# shape: a workspace buffer is allocated inside `torch.inference_mode(False)` nested in an inference block, so it is an ordinary tensor, updated in place after the block
import torch

CACHE = {}


def workspace(n):
    if n not in CACHE:
        with torch.inference_mode(False):
            CACHE[n] = torch.zeros(n)
    return CACHE[n]


with torch.inference_mode():
    buf = workspace(4)
buf.add_(1.0)
print(buf)
