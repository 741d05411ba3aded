# expect: clean
# source: https://github.com/shengliu66/SOP/issues/13
# Trying SOP (sparse over-parameterization) on my own noisy-label setup.
# My labels come from numpy as float64 one-hots, so I keep u and v in float64.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

torch.manual_seed(0)
np.random.seed(0)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class overparametrization_loss(nn.Module):
    def __init__(self, num_examp, num_classes=10, ratio_consistency=0, ratio_balance=0, ratio_reg=100):
        super(overparametrization_loss, self).__init__()
        self.num_classes = num_classes
        self.ratio_reg = ratio_reg
        self.u = nn.Parameter(torch.empty(num_examp, 1, dtype=torch.float64, device=device))
        self.v = nn.Parameter(torch.empty(num_examp, num_classes, dtype=torch.float64, device=device))
        torch.nn.init.normal_(self.u, mean=0.0, std=1e-8)
        torch.nn.init.normal_(self.v, mean=0.0, std=1e-8)

    def forward(self, index, output, label):
        U_square = torch.clamp(self.u[index] ** 2 * label, 0, 1 - 1e-4)
        V_square = torch.clamp(self.v[index] ** 2 * (1 - label), 0, 1 - 1e-4)
        original_prediction = F.softmax(output, dim=1).double()
        prediction = torch.clamp(original_prediction + U_square - V_square.detach(), min=1e-4)
        prediction = F.normalize(prediction, p=1, eps=1e-4)
        loss = torch.mean(-torch.sum(label * torch.log(prediction), dim=-1))
        label_one_hot = F.one_hot(output.detach().argmax(1), self.num_classes).double()
        MSE_loss = F.mse_loss(label_one_hot + U_square.detach() - V_square, label, reduction='sum') / len(label)
        return loss + self.ratio_reg * MSE_loss


N, C = 500, 10
x = torch.randn(N, 20)
y_clean = (x[:, :C]).argmax(1).numpy()
y_noisy = np.where(np.random.rand(N) < 0.3, np.random.randint(0, C, N), y_clean)
labels = torch.from_numpy(np.eye(C)[y_noisy]).to(device)  # float64 one-hot

model1 = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, C)).to(device)
optimizer = optim.SGD([{'params': model1.parameters()}], lr=1e-1, momentum=0.9)
SOP1_loss = overparametrization_loss(num_examp=N, num_classes=C)
print(SOP1_loss.u[:3])

optimizer_loss = optim.SGD([{'params': SOP1_loss.u, 'lr': 1, 'weight_decay': 0}, {'params': SOP1_loss.v, 'lr': 10, 'weight_decay': 0}])

for epoch in range(5):
    perm = torch.randperm(N)
    for b in range(0, N, 100):
        index = perm[b:b + 100]
        loss = SOP1_loss(index, model1(x[index]), labels[index])
        optimizer.zero_grad()
        optimizer_loss.zero_grad()
        loss.backward()
        optimizer.step()
        optimizer_loss.step()
    acc = (model1(x).argmax(1).numpy() == y_clean).mean()
    print(f"epoch {epoch}: loss {loss.item():.4f} clean acc {acc:.3f}")
