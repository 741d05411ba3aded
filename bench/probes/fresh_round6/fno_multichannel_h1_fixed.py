# expect: clean
# source: https://github.com/neuraloperator/neuraloperator/issues/103
# FDTD fields -> FNO; first T steps as input channels, next T steps as output channels.
import math
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
T, S = 4, 16                                   # channels (time steps), grid size
fields = torch.randn(24, 2 * T, S, S).cumsum(dim=1) * 0.1
x_train, y_train = fields[:, :T], fields[:, T:]


class SpectralConv2d(nn.Module):
    def __init__(self, cin, cout, modes):
        super().__init__()
        self.modes = modes
        self.w = nn.Parameter(torch.randn(cin, cout, modes, modes, dtype=torch.cfloat) / (cin * cout))

    def forward(self, x):
        xf = torch.fft.rfft2(x)
        out = torch.zeros(x.shape[0], self.w.shape[1], x.shape[-2], x.shape[-1] // 2 + 1,
                          dtype=torch.cfloat)
        m = self.modes
        out[:, :, :m, :m] = torch.einsum("bixy,ioxy->boxy", xf[:, :, :m, :m], self.w)
        return torch.fft.irfft2(out, s=x.shape[-2:])


class FNO(nn.Module):
    def __init__(self, n_modes, hidden_channels, in_channels, out_channels):
        super().__init__()
        self.lift = nn.Conv2d(in_channels, hidden_channels, 1)
        self.spec = nn.ModuleList(SpectralConv2d(hidden_channels, hidden_channels, n_modes) for _ in range(2))
        self.skip = nn.ModuleList(nn.Conv2d(hidden_channels, hidden_channels, 1) for _ in range(2))
        self.proj = nn.Conv2d(hidden_channels, out_channels, 1)

    def forward(self, x):
        x = self.lift(x)
        for s, w in zip(self.spec, self.skip):
            x = torch.nn.functional.gelu(s(x) + w(x))
        return self.proj(x)


class H1Loss:
    """Relative H1 loss (as in neuralop.losses)."""
    def __init__(self, d=2, L=2 * math.pi, reduce_dims=0):
        self.d, self.L = d, L
        self.reduce_dims = [reduce_dims] if isinstance(reduce_dims, int) else reduce_dims

    def __call__(self, x, y):
        h = self.L / x.size(-1)
        terms = lambda t: [t, (torch.roll(t, -1, -1) - torch.roll(t, 1, -1)) / (2 * h),
                           (torch.roll(t, -1, -2) - torch.roll(t, 1, -2)) / (2 * h)]
        diff = sum(torch.norm((a - b).flatten(-self.d), dim=-1) ** 2 for a, b in zip(terms(x), terms(y)))
        ynorm = sum(torch.norm(b.flatten(-self.d), dim=-1) ** 2 for b in terms(y))
        out = diff.sqrt() / ynorm.sqrt()
        for dim in self.reduce_dims:
            out = out.sum(dim=dim, keepdim=True)
        return out.squeeze()


train_loader = DataLoader(TensorDataset(x_train, y_train), batch_size=8, shuffle=True)
model = FNO(n_modes=6, hidden_channels=16, in_channels=T, out_channels=T)
optimizer = torch.optim.Adam(model.parameters(), lr=8e-3, weight_decay=1e-4)
h1loss = H1Loss(d=2, reduce_dims=[0, 1])

for epoch in range(3):
    for x, y in train_loader:
        optimizer.zero_grad()
        loss = h1loss(model(x), y)
        loss.backward()
        optimizer.step()
    print(epoch, loss.item())
