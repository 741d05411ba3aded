# expect: clean
# source: https://github.com/neuraloperator/neuraloperator/pull/291
import torch
import torch.nn as nn

torch.manual_seed(0)


class LpLoss:
    def __init__(self, d=2, p=2, reduce_dims=0, reductions="sum"):
        self.d = d
        self.p = p
        self.reduce_dims = [reduce_dims] if isinstance(reduce_dims, int) else list(reduce_dims)
        self.reductions = [reductions] * len(self.reduce_dims)

    def reduce_all(self, x):
        for dim, red in zip(self.reduce_dims, self.reductions):
            x = torch.sum(x, dim=dim, keepdim=True) if red == "sum" else torch.mean(x, dim=dim, keepdim=True)
        return x.squeeze()

    def rel(self, x, y):
        diff = torch.norm(torch.flatten(x, start_dim=-self.d) - torch.flatten(y, start_dim=-self.d), p=self.p, dim=-1)
        ynorm = torch.norm(torch.flatten(y, start_dim=-self.d), p=self.p, dim=-1)
        return self.reduce_all(diff / ynorm)

    def __call__(self, y_pred, y):
        return self.rel(y_pred, y)


class TinyOperator(nn.Module):
    def __init__(self, in_channels=1, out_channels=2, width=16):
        super().__init__()
        self.lift = nn.Conv2d(in_channels, width, 1)
        self.mix = nn.Sequential(nn.Conv2d(width, width, 3, padding=1), nn.GELU(), nn.Conv2d(width, width, 3, padding=1), nn.GELU())
        self.proj = nn.Conv2d(width, out_channels, 1)

    def forward(self, x):
        return self.proj(self.mix(self.lift(x)))


a = torch.randn(32, 1, 16, 16)
u = torch.cat([torch.sin(a), torch.cos(a) * a], dim=1)

model = TinyOperator(out_channels=u.shape[1])
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
train_loss = LpLoss(d=2, p=2)

for epoch in range(5):
    for i in range(0, a.shape[0], 8):
        x, y = a[i:i + 8], u[i:i + 8]
        optimizer.zero_grad()
        out = model(x)
        loss = train_loss(out, y)
        loss.sum().backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.sum().item():.4f}")
