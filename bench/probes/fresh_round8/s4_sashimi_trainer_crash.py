# expect: inference_tensor
# source: https://github.com/state-spaces/s4/issues/169
"""Sashimi-style S4 autoregressive waveform model trained with a Lightning-like Trainer.

The DPLR/diagonal SSM kernel is computed in frequency space with a Cauchy kernel; when the
structured-kernels extension is installed, the custom autograd Function is used instead of
the naive broadcasted implementation.
"""
import math
from contextlib import nullcontext

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)


# ----------------------------------------------------------------------------- extensions/kernels/cauchy.py
def cauchy_naive(v, z, w):
    """v: (..., N), z: (L), w: (..., N) -> (..., L)"""
    return (v.unsqueeze(-1) / (z - w.unsqueeze(-1))).sum(dim=-2)


class CauchyMultiply(torch.autograd.Function):
    """Memory-efficient Cauchy kernel (stand-in for structured_kernels.cauchy_mult_fwd/bwd)."""

    @staticmethod
    def forward(ctx, v, z, w):
        batch, N = v.shape
        supported_N_values = [1 << log_n for log_n in range(1, 11)]
        if N not in supported_N_values:
            raise NotImplementedError(f'Only support N values in {supported_N_values}')
        ctx.save_for_backward(v, z, w)
        return cauchy_naive(v, z, w)

    @staticmethod
    def backward(ctx, dout):
        v, z, w = ctx.saved_tensors
        with torch.enable_grad():
            v_, w_ = v.detach().requires_grad_(), w.detach().requires_grad_()
            dv, dw = torch.autograd.grad(cauchy_naive(v_, z, w_), (v_, w_), dout)
        return dv, None, dw


def cauchy_cuda(v, z, w):
    """Wrap the extension to deal with shapes."""
    v, w = torch.broadcast_tensors(v, w)
    shape = v.shape
    N = v.size(-1)
    y = CauchyMultiply.apply(v.contiguous().view(-1, N), z.contiguous(), w.contiguous().view(-1, N))  # raises
    return y.view(*shape[:-1], z.size(-1))


has_cuda_extension = True  # `import structured_kernels` succeeded


# ----------------------------------------------------------------------------- models/s4/s4.py
def _r2c(x):
    return torch.view_as_complex(x)


def _c2r(x):
    return torch.view_as_real(x)


class SSMKernelDiag(nn.Module):
    """Diagonal SSM kernel (S4D-Lin init), evaluated at the roots of unity through a Cauchy kernel."""

    def __init__(self, d_model, N=16, l_max=64, dt_min=1e-3, dt_max=1e-1, backend="cuda"):
        super().__init__()
        self.H, self.N, self.l_max, self.backend = d_model, N // 2, l_max, backend
        log_dt = torch.rand(self.H) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)
        A = -0.5 + 1j * math.pi * torch.arange(self.N).float()
        B = torch.ones(self.H, self.N, dtype=torch.cfloat)
        C = torch.randn(self.H, self.N, dtype=torch.cfloat) * (0.5 ** 0.5)
        self.log_dt = nn.Parameter(log_dt)
        self.A_real = nn.Parameter(torch.log(-A.real).repeat(self.H, 1))
        self.A_imag = nn.Parameter(A.imag.repeat(self.H, 1))
        self.B = nn.Parameter(_c2r(B))
        self.C = nn.Parameter(_c2r(C))

    def _omega(self, L, dtype, device, cache=True):
        """Calculate (and cache) FFT nodes.

        This also caches a version of the nodes "unprocessed" with the bilinear transform.
        """
        # Use cached if available
        if cache and hasattr(self, 'omega') and self.omega.size(-1) == L // 2 + 1:
            return self.omega, self.z
        omega = torch.tensor(np.exp(-2j * np.pi / L), dtype=dtype, device=device)  # \omega_{2L}
        omega = omega ** torch.arange(0, L // 2 + 1, device=device)
        z = 2 * (1 - omega) / (1 + omega)
        # Cache if necessary
        if cache:
            self.omega = omega
            self.z = z
        return omega, z

    def forward(self, L):
        dt = torch.exp(self.log_dt)
        A = -torch.exp(self.A_real) + 1j * self.A_imag
        omega, z = self._omega(L, dtype=A.dtype, device=A.device)
        v = _r2c(self.B) * _r2c(self.C) * dt.unsqueeze(-1)
        w = A * dt.unsqueeze(-1)
        v = torch.cat([v, v.conj()], dim=-1)
        w = torch.cat([w, w.conj()], dim=-1)
        if has_cuda_extension and z.dtype == torch.cfloat and self.backend == 'cuda':
            cauchy_mult = cauchy_cuda
        else:
            cauchy_mult = cauchy_naive
        r = cauchy_mult(v, z, w)
        k_f = r * 2 / (1 + omega)
        return torch.fft.irfft(k_f, n=L)[..., :L]  # (H, L)


class S4Block(nn.Module):
    def __init__(self, d_model, l_max, dropout=0.0):
        super().__init__()
        self.kernel = SSMKernelDiag(d_model, l_max=l_max)
        self.D = nn.Parameter(torch.randn(d_model))
        self.norm = nn.LayerNorm(d_model)
        self.output_linear = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.GLU(dim=-1))
        self.drop = nn.Dropout(dropout)

    def forward(self, x):  # x: (B, L, H)
        u = self.norm(x).transpose(1, 2)
        L = u.size(-1)
        k = self.kernel(L)
        y = torch.fft.irfft(torch.fft.rfft(u, n=2 * L) * torch.fft.rfft(k, n=2 * L), n=2 * L)[..., :L]
        y = F.gelu(y + u * self.D.unsqueeze(-1)).transpose(1, 2)
        return x + self.drop(self.output_linear(y))


class Sashimi(nn.Module):
    def __init__(self, n_classes=32, d_model=16, n_layers=2, l_max=64):
        super().__init__()
        self.embed = nn.Embedding(n_classes, d_model)
        self.layers = nn.ModuleList([S4Block(d_model, l_max) for _ in range(n_layers)])
        self.head = nn.Linear(d_model, n_classes)

    def forward(self, x):
        h = self.embed(x)
        for layer in self.layers:
            h = layer(h)
        return self.head(h)


# ----------------------------------------------------------------------------- lightning-like
class LitSashimi(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = Sashimi()

    def training_step(self, batch):
        x, y = batch
        return F.cross_entropy(self.model(x).transpose(1, 2), y)

    def validation_step(self, batch):
        x, y = batch
        return F.cross_entropy(self.model(x).transpose(1, 2), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=4e-3, weight_decay=0.0)


class Trainer:
    def __init__(self, max_epochs=1, num_sanity_val_steps=2, inference_mode=True):
        self.max_epochs = max_epochs
        self.num_sanity_val_steps = num_sanity_val_steps
        self.inference_mode = inference_mode

    def _evaluation_context(self):
        return torch.inference_mode() if self.inference_mode else torch.no_grad()

    def _run_sanity_check(self, module, val_loader):
        module.eval()
        with self._evaluation_context():
            for i, batch in enumerate(val_loader):
                if i >= self.num_sanity_val_steps:
                    break
                module.validation_step(batch)
        module.train()

    def fit(self, module, train_loader, val_loader):
        optimizer = module.configure_optimizers()
        self._run_sanity_check(module, val_loader)
        for epoch in range(self.max_epochs):
            for step, batch in enumerate(train_loader):
                loss = module.training_step(batch)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                if step % 2 == 0:
                    print(f"epoch {epoch} step {step}: loss {loss.item():.3f}")


def mu_law_batches(n_batches, bs=4, L=64, q=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n_batches):
        t = torch.linspace(0, 1, L + 1)
        f = 2 + 6 * torch.rand(bs, 1, generator=g)
        wav = torch.sin(2 * math.pi * f * t) * 0.8
        mu = torch.sign(wav) * torch.log1p(255 * wav.abs()) / math.log1p(255)
        codes = ((mu + 1) / 2 * (q - 1)).round().long()
        out.append((codes[:, :-1], codes[:, 1:]))
    return out


trainer = Trainer(max_epochs=1)
trainer.fit(LitSashimi(), mu_law_batches(4), mu_law_batches(2, seed=1))
