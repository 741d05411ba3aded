# expect: inference_tensor
# shape: a workspace buffer is first allocated inside an inference block (no `inference_mode(False)` around it), so it is an inference tensor, and the in-place update after the block raises
import torch

CACHE = {}


def workspace(n):
    if n not in CACHE:
        CACHE[n] = torch.zeros(n)
    return CACHE[n]


with torch.inference_mode():
    buf = workspace(4)
buf.add_(1.0)  # raises
print(buf)
