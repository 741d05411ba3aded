# expect: nonscalar_backward
# source: https://github.com/neuraloperator/neuraloperator/pull/160
"""Fourier Neural Operator emulator for multi-variable regional weather fields.

An FNO2d (lifting, spectral convolution blocks with skip connections,
projection) maps the current state of four surface variables (t2m, u10, v10,
msl) on a 32x32 grid to the state six hours later.  Training follows the
neuraloperator layout: a UnitGaussianNormalizer output encoder, an H1 loss for
training and H1/L2 losses for evaluation, a Trainer with a step LR scheduler.
Fields are seeded synthetic advected waves.
"""
import math
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class UnitGaussianNormalizer:
    def __init__(self, x, eps=1e-5, reduce_dim=(0, 2, 3)):
        self.mean = torch.mean(x, dim=reduce_dim, keepdim=True)
        self.std = torch.std(x, dim=reduce_dim, keepdim=True)
        self.eps = eps

    def encode(self, x):
        return (x - self.mean) / (self.std + self.eps)

    def decode(self, x):
        return x * (self.std + self.eps) + self.mean


class LpLoss:
    def __init__(self, d=1, p=2, L=2 * math.pi, reduce_dims=0, reductions='sum'):
        self.d, self.p = d, p
        self.reduce_dims = [reduce_dims] if isinstance(reduce_dims, int) else list(reduce_dims)
        self.reductions = [reductions] * len(self.reduce_dims) if isinstance(reductions, str) else reductions
        self.L = [L] * d if isinstance(L, float) else L

    def reduce_all(self, x):
        for j in range(len(self.reduce_dims)):
            if self.reductions[j] == 'sum':
                x = torch.sum(x, dim=self.reduce_dims[j], keepdim=True)
            else:
                x = torch.mean(x, dim=self.reduce_dims[j], keepdim=True)
        return x

    def rel(self, x, y):
        diff = torch.norm(torch.flatten(x, start_dim=-self.d) - torch.flatten(y, start_dim=-self.d), p=self.p, dim=-1)
        ynorm = torch.norm(torch.flatten(y, start_dim=-self.d), p=self.p, dim=-1)
        return self.reduce_all(diff / ynorm).squeeze()

    def __call__(self, y_pred, y, **kwargs):
        return self.rel(y_pred, y)


class H1Loss(LpLoss):
    def __init__(self, d=2, L=2 * math.pi, reduce_dims=0, reductions='sum'):
        super().__init__(d=d, p=2, L=L, reduce_dims=reduce_dims, reductions=reductions)

    def compute_terms(self, x, y):
        h = [self.L[j] / x.size(-self.d + j) for j in range(self.d)]
        dict_x, dict_y = {0: x}, {0: y}
        dict_x[1] = (torch.roll(x, -1, dims=-2) - torch.roll(x, 1, dims=-2)) / (2.0 * h[0])
        dict_x[2] = (torch.roll(x, -1, dims=-1) - torch.roll(x, 1, dims=-1)) / (2.0 * h[1])
        dict_y[1] = (torch.roll(y, -1, dims=-2) - torch.roll(y, 1, dims=-2)) / (2.0 * h[0])
        dict_y[2] = (torch.roll(y, -1, dims=-1) - torch.roll(y, 1, dims=-1)) / (2.0 * h[1])
        return dict_x, dict_y

    def rel(self, x, y):
        dict_x, dict_y = self.compute_terms(x, y)
        flat = lambda t: torch.flatten(t, start_dim=-self.d)
        diff = torch.norm(flat(dict_x[0]) - flat(dict_y[0]), p=2, dim=-1, keepdim=False) ** 2
        ynorm = torch.norm(flat(dict_y[0]), p=2, dim=-1, keepdim=False) ** 2
        for j in range(1, self.d + 1):
            diff += torch.norm(flat(dict_x[j]) - flat(dict_y[j]), p=2, dim=-1, keepdim=False) ** 2
            ynorm += torch.norm(flat(dict_y[j]), p=2, dim=-1, keepdim=False) ** 2
        diff = (diff ** 0.5) / (ynorm ** 0.5)
        return self.reduce_all(diff).squeeze()


class SpectralConv2d(nn.Module):
    def __init__(self, in_channels, out_channels, n_modes):
        super().__init__()
        self.n_modes = n_modes
        scale = 1 / (in_channels * out_channels)
        self.weight1 = nn.Parameter(scale * torch.randn(in_channels, out_channels, n_modes, n_modes, dtype=torch.cfloat))
        self.weight2 = nn.Parameter(scale * torch.randn(in_channels, out_channels, n_modes, n_modes, dtype=torch.cfloat))

    def forward(self, x):
        b, _, h, w = x.shape
        x_ft = torch.fft.rfft2(x)
        out_ft = torch.zeros(b, self.weight1.size(1), h, w // 2 + 1, dtype=torch.cfloat)
        m = self.n_modes
        out_ft[:, :, :m, :m] = torch.einsum("bixy,ioxy->boxy", x_ft[:, :, :m, :m], self.weight1)
        out_ft[:, :, -m:, :m] = torch.einsum("bixy,ioxy->boxy", x_ft[:, :, -m:, :m], self.weight2)
        return torch.fft.irfft2(out_ft, s=(h, w))


class FNO2d(nn.Module):
    def __init__(self, n_modes, hidden_channels, in_channels, out_channels, n_layers=3):
        super().__init__()
        self.lifting = nn.Conv2d(in_channels + 2, hidden_channels, 1)
        self.convs = nn.ModuleList([SpectralConv2d(hidden_channels, hidden_channels, n_modes) for _ in range(n_layers)])
        self.skips = nn.ModuleList([nn.Conv2d(hidden_channels, hidden_channels, 1) for _ in range(n_layers)])
        self.projection = nn.Sequential(nn.Conv2d(hidden_channels, 2 * hidden_channels, 1), nn.GELU(),
                                        nn.Conv2d(2 * hidden_channels, out_channels, 1))

    @staticmethod
    def positional_embedding(x):
        b, _, h, w = x.shape
        gy, gx = torch.meshgrid(torch.linspace(0, 1, h), torch.linspace(0, 1, w), indexing='ij')
        return torch.cat([x, gy.expand(b, 1, h, w), gx.expand(b, 1, h, w)], 1)

    def forward(self, x):
        x = self.lifting(self.positional_embedding(x))
        for i, (conv, skip) in enumerate(zip(self.convs, self.skips)):
            x = conv(x) + skip(x)
            if i < len(self.convs) - 1:
                x = F.gelu(x)
        return self.projection(x)


def make_weather_fields(n, variables, res, seed):
    rng = np.random.RandomState(seed)
    gy, gx = np.meshgrid(np.linspace(0, 2 * np.pi, res), np.linspace(0, 2 * np.pi, res), indexing='ij')
    x = np.zeros((n, variables, res, res), np.float32)
    y = np.zeros_like(x)
    for i in range(n):
        for c in range(variables):
            k, phase, speed = rng.randint(1, 4), rng.rand() * 2 * np.pi, 0.3 + rng.rand()
            x[i, c] = np.sin(k * gx + phase) * np.cos(gy + c)
            y[i, c] = np.sin(k * (gx - speed) + phase) * np.cos(gy + c)
    return torch.from_numpy(x), torch.from_numpy(y)


class Trainer:
    def __init__(self, model, n_epochs, output_encoder=None, log_test_interval=1):
        self.model = model
        self.n_epochs = n_epochs
        self.output_encoder = output_encoder
        self.log_test_interval = log_test_interval

    def train(self, train_loader, test_loader, optimizer, scheduler, training_loss, eval_losses):
        for epoch in range(self.n_epochs):
            self.model.train()
            train_err = 0.0
            for x, y in train_loader:
                optimizer.zero_grad(set_to_none=True)
                out = self.model(x)
                loss = training_loss(out.float(), y)
                loss.backward()  # raises
                optimizer.step()
                train_err += loss.item()
            scheduler.step()
            if epoch % self.log_test_interval == 0:
                msg = self.evaluate(eval_losses, test_loader)
                print('[%d] train_err=%.4f %s' % (epoch, train_err / len(train_loader), msg))

    @torch.no_grad()
    def evaluate(self, loss_dict, data_loader):
        self.model.eval()
        errors = {name: 0.0 for name in loss_dict}
        for x, y in data_loader:
            out = self.model(x)
            if self.output_encoder is not None:
                out, y = self.output_encoder.decode(out), self.output_encoder.decode(y)
            for name, loss in loss_dict.items():
                errors[name] += loss(out, y).sum().item()
        return ' '.join('%s=%.4f' % (k, v / len(data_loader)) for k, v in errors.items())


def main():
    torch.manual_seed(0)
    config = SimpleNamespace(variables=['t2m', 'u10', 'v10', 'msl'], res=32, n_train=16, n_test=4, batch_size=4,
                             n_modes=8, hidden_channels=16, lr=8e-3, n_epochs=2)
    n_var = len(config.variables)
    x_train, y_train = make_weather_fields(config.n_train, n_var, config.res, seed=0)
    x_test, y_test = make_weather_fields(config.n_test, n_var, config.res, seed=1)
    output_encoder = UnitGaussianNormalizer(y_train)
    y_train, y_test = output_encoder.encode(y_train), output_encoder.encode(y_test)
    batches = lambda x, y: list(zip(x.split(config.batch_size), y.split(config.batch_size)))

    model = FNO2d(config.n_modes, config.hidden_channels, in_channels=n_var, out_channels=n_var)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    l2loss = LpLoss(d=2, p=2)
    h1loss = H1Loss(d=2)
    trainer = Trainer(model, config.n_epochs, output_encoder=output_encoder)
    trainer.train(batches(x_train, y_train), batches(x_test, y_test), optimizer, scheduler,
                  training_loss=h1loss, eval_losses={'h1': h1loss, 'l2': l2loss})


if __name__ == '__main__':
    main()
