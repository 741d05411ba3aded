# expect: clean
# shape: the twin of custom_function_saves_cached_inference_kernel_crash.py whose validation pass runs under `torch.no_grad()`: the cached kernel is an ordinary tensor, which the Function may save
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
        return KernelMultiply.apply(x * self.log_scale.exp(), self.get_kernel())


layer = CachedKernelLayer(8)
opt = torch.optim.SGD(layer.parameters(), lr=0.1)
x = torch.randn(4, 8)
with torch.no_grad():
    print("val", layer(x).mean().item())
for step in range(2):
    out = layer(x)
    opt.zero_grad()
    out.pow(2).mean().backward()
    opt.step()
