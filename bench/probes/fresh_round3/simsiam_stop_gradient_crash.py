# expect: requires_grad_nonleaf
# source: https://github.com/keras-team/keras-core/pull/417
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


def convert_to_tensor(x, dtype=torch.float32):
    return x if torch.is_tensor(x) else torch.as_tensor(x, dtype=dtype)


def stop_gradient(variable):
    return variable.requires_grad_(False)  # raises


def negative_cosine(p, z):
    z = stop_gradient(convert_to_tensor(z))
    return -F.cosine_similarity(p, z, dim=-1).mean()


class SimSiam(nn.Module):
    def __init__(self, in_dim=32, dim=16, pred_dim=8):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(in_dim, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, dim))
        self.predictor = nn.Sequential(nn.Linear(dim, pred_dim), nn.ReLU(), nn.Linear(pred_dim, dim))

    def forward(self, x1, x2):
        z1, z2 = self.encoder(x1), self.encoder(x2)
        p1, p2 = self.predictor(z1), self.predictor(z2)
        return p1, p2, z1, z2


def augment(x):
    return x * (1 + 0.1 * torch.randn_like(x)) + 0.05 * torch.randn_like(x)


model = SimSiam()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
data = torch.randn(128, 32)

for step in range(20):
    batch = data[torch.randint(0, 128, (32,))]
    p1, p2, z1, z2 = model(augment(batch), augment(batch))
    loss = 0.5 * (negative_cosine(p1, z2) + negative_cosine(p2, z1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 5 == 0:
        print(f"step {step} loss {loss.item():.4f}")
