# expect: inference_tensor
# shape: a layer caches its kernel on first use; the first use is a validation pass under `torch.inference_mode()`, so the cache is an inference tensor, and in training a custom autograd Function saves it with `ctx.save_for_backward`
import torch
import torch.nn as nn


class KernelMultiply(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, kernel):
        ctx.save_for_backward(x, kernel)
        return x * kernel

    @staticmethod
    def backward(ctx, grad):
        x, kernel = ctx.saved_tensors
        return grad * kernel, grad * x


class CachedKernelLayer(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.log_scale = nn.Parameter(torch.zeros(n))
        self.n = n
        self.kernel = None

    def get_kernel(self):
        if self.kernel is None:
            self.kernel = torch.exp(-torch.arange(self.n).float() / self.n)
        return self.kernel

    def forward(self, x):
        return KernelMultiply.apply(x * self.log_scale.exp(), self.get_kernel())  # raises


layer = CachedKernelLayer(8)
opt = torch.optim.SGD(layer.parameters(), lr=0.1)
x = torch.randn(4, 8)
with torch.inference_mode():
    print("val", layer(x).mean().item())
for step in range(2):
    out = layer(x)
    opt.zero_grad()
    out.pow(2).mean().backward()
    opt.step()
