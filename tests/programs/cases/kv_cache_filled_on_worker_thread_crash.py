# expect: inference_tensor
# shape: a serving wrapper allocates its KV cache in an inference_mode constructor and streams generation from a thread-pool worker; the worker thread runs outside inference mode, so writing the cache in place raises there
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn as nn


class Backend(nn.Module):
    @torch.inference_mode()
    def __init__(self, d=8, max_len=32):
        super().__init__()
        self.proj = nn.Linear(d, d)
        self.cache = torch.zeros(max_len, d)
        self.pos = 0

    def forward(self, x):
        k = self.proj(x)
        self.cache[self.pos:self.pos + x.shape[0]] = k  # raises
        self.pos += x.shape[0]
        return k


@torch.no_grad()
def generate(model, prompt, steps=3):
    out = model(prompt)
    for _ in range(steps):
        out = model(out[-1:])
    return out


def stream(model, prompt):
    with ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(generate, model, prompt)
        return future.result()


print(stream(Backend(), torch.randn(4, 8)).shape)
